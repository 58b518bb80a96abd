// Package secrets keeps apps' secrets sealed in the store: AES-256-GCM
// under a key kept in a file outside the store (made on first use, 0600),
// each value bound to its app and name, so the store holds no plaintext
// and a sealed value cannot be moved to another app or name. It lists
// names and update times, never values; values are opened only to be
// written into a replica's /run/secrets (localnode).
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KeySize is the size of a key file: 32 bytes, AES-256.
const KeySize = 32

// Key seals and opens secrets.
type Key struct {
	aead cipher.AEAD
	// ID names the key (the first 8 bytes of its SHA-256, hex) in each
	// sealed record, so a node with another key says so.
	ID   string
	path string
	// older keys still open what they sealed (Open picks by ID).
	older []*Key
	// refuse, when set, is why this key must not seal (OpenOnly).
	refuse error
}

// DeriveKey makes a Key from a secret shared by the nodes of a cluster
// (HKDF-SHA256, bound to label), for what every node must open; name
// names it in errors.
func DeriveKey(secret, label, name string) (*Key, error) {
	if len(secret) < 16 {
		return nil, fmt.Errorf("secrets key %s: the secret it is derived from holds %d bytes, want 16 or more", name, len(secret))
	}
	b, err := hkdf.Key(sha256.New, []byte(secret), nil, label, KeySize)
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", name, err)
	}
	return NewKey(b, name)
}

// WithOlder returns k that also opens what the older keys sealed (its own
// seals use k): records sealed before a change of key stay readable.
func (k *Key) WithOlder(older ...*Key) *Key {
	c := *k
	for _, o := range older {
		if o != nil && o.ID != k.ID {
			c.older = append(c.older, o)
		}
	}
	return &c
}

// OpenOnly returns k that still opens what it (or its older keys) sealed
// but refuses to seal anything new, with why: a key whose secret is kept
// beside what it would seal protects nothing.
func (k *Key) OpenOnly(why error) *Key {
	c := *k
	c.refuse = why
	return &c
}

// CanSeal tells why k refuses to seal (OpenOnly), or nil.
func (k *Key) CanSeal() error { return k.refuse }

// LoadKey reads the key in path, or makes one there (32 random bytes, mode
// 0600) when the file does not exist. A key file readable or writable by
// group or others, or not KeySize bytes, is refused.
func LoadKey(path string) (*Key, error) {
	b, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		b, err = makeKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	return NewKey(b, path)
}

// NewKey makes a Key of KeySize bytes; path only names it in errors.
func NewKey(b []byte, path string) (*Key, error) {
	if len(b) != KeySize {
		return nil, fmt.Errorf("secrets key %s: %d bytes, want %d", path, len(b), KeySize)
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	sum := sha256.Sum256(b)
	return &Key{aead: aead, ID: hex.EncodeToString(sum[:8]), path: path}, nil
}

func readKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case !st.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case st.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("mode %04o: group and others must have no access (chmod 600)", st.Mode().Perm())
	case st.Size() != KeySize:
		return nil, fmt.Errorf("%d bytes, want %d (a file made by shoal, copied whole)", st.Size(), KeySize)
	}
	b := make([]byte, KeySize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// makeKey writes a new key to path, whole or not at all: a temporary file
// synced, then linked to path (so two daemons racing keep one key).
func makeKey(path string) ([]byte, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".secrets-key-*")
	if err != nil {
		return nil, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
		return readKey(path)
	} else if err != nil {
		return nil, err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return b, nil
}

// Sealed is a secret as the store keeps it.
type Sealed struct {
	KeyID string `json:"key_id"`
	Nonce []byte `json:"nonce"`
	Data  []byte `json:"data"` // ciphertext and tag
}

// aad binds a sealed value to its app and name.
func aad(app, name string) []byte { return []byte("shoal secret\x00" + app + "\x00" + name) }

// Seal encrypts value, app's secret name.
func (k *Key) Seal(app, name string, value []byte) (Sealed, error) {
	if k.refuse != nil {
		return Sealed{}, k.refuse
	}
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Sealed{}, fmt.Errorf("secret %s/%s: %w", app, name, err)
	}
	return Sealed{KeyID: k.ID, Nonce: nonce, Data: k.aead.Seal(nil, nonce, value, aad(app, name))}, nil
}

// Open decrypts s, app's secret name; it fails when s was sealed with
// another key, for another app or name, or was changed.
func (k *Key) Open(app, name string, s Sealed) ([]byte, error) {
	if s.KeyID != k.ID {
		for _, o := range k.older {
			if o.ID == s.KeyID {
				return o.Open(app, name, s)
			}
		}
		return nil, fmt.Errorf("secret %s/%s was sealed with key %s, this node's key (%s) is %s: every node of a cluster needs the same --secrets-key-file", app, name, s.KeyID, k.path, k.ID)
	}
	if len(s.Nonce) != k.aead.NonceSize() {
		return nil, fmt.Errorf("secret %s/%s: bad nonce", app, name)
	}
	v, err := k.aead.Open(nil, s.Nonce, s.Data, aad(app, name))
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: cannot be opened (changed, or moved from another app or name): %w", app, name, err)
	}
	return v, nil
}
