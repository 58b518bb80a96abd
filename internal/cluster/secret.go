package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Secret returns the secret the nodes of the cluster authenticate each
// other with. With file set it is the file's content (every node must be
// given the same file, which no one but its owner may read or write: the
// secret is the keys to every node); otherwise it is the one kept in the
// store at store.ClusterSecretKey, made once from crypto/rand by the first
// node that finds it missing (a create-if-absent write: nodes joining
// together agree).
func Secret(ctx context.Context, st store.Store, file string) (string, error) {
	if file != "" {
		return secretFile(file)
	}
	for {
		kv, err := st.Get(ctx, store.ClusterSecretKey)
		if err == nil {
			if s := strings.TrimSpace(string(kv.Value)); s != "" {
				return s, nil
			}
			return "", fmt.Errorf("cluster secret %s is empty", store.ClusterSecretKey)
		}
		if !errdefs.IsNotFound(err) {
			return "", fmt.Errorf("cluster secret: %w", err)
		}
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("cluster secret: %w", err)
		}
		_, err = st.CompareAndSwap(ctx, store.ClusterSecretKey, 0, []byte(hex.EncodeToString(b)))
		if err != nil && !errdefs.IsConflict(err) {
			return "", fmt.Errorf("cluster secret: %w", err)
		}
		// Written, or another node wrote it first: read what is there.
	}
}

// secretFile reads the cluster secret from file, which must be private to
// its owner and hold at least 16 characters.
func secretFile(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", errdefs.Invalid("--cluster-token-file", "%v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", errdefs.Invalid("--cluster-token-file", "%v", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", errdefs.Invalid("--cluster-token-file", "%s has mode %04o: others than its owner may read or change the cluster secret (chmod 600 %s)", file, perm, file)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", errdefs.Invalid("--cluster-token-file", "%s: %v", file, err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return "", errdefs.Invalid("--cluster-token-file", "%s holds %d characters: use a secret of at least 16 (e.g. openssl rand -hex 32)", file, len(s))
	}
	return s, nil
}
