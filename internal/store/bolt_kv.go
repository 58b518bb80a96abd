package store

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Get returns the key's value and revisions.
func (b *Bolt) Get(ctx context.Context, key string) (KV, error) {
	if err := ctxErr(ctx, key); err != nil {
		return KV{}, err
	}
	var kv KV
	found := false
	err := b.view(func(bk *bolt.Bucket) error {
		if raw := bk.Get([]byte(key)); raw != nil {
			kv, found = decodeKV(key, raw), true
		}
		return nil
	})
	if err != nil {
		return KV{}, fmt.Errorf("key %q: %w", key, err)
	}
	if !found {
		return KV{}, fmt.Errorf("key %q: %w", key, errdefs.ErrNotFound)
	}
	return kv, nil
}

// Put writes value under key and returns the revision of the write.
func (b *Bolt) Put(ctx context.Context, key string, value []byte, opts ...PutOption) (int64, error) {
	if err := checkWrite(ctx, key); err != nil {
		return 0, err
	}
	o := putOptions(opts)
	var rev int64
	err := b.update(func(t *boltTx) error {
		var err error
		rev, err = t.put(key, value, o.Lease)
		return err
	})
	if err != nil {
		return 0, wrapKey(key, err)
	}
	return rev, nil
}

// Delete removes key; a missing key is errdefs.ErrNotFound.
func (b *Bolt) Delete(ctx context.Context, key string) error {
	if err := ctxErr(ctx, key); err != nil {
		return err
	}
	return wrapKey(key, b.update(func(t *boltTx) error { return t.del(key) }))
}

// List returns every key under prefix in lexical order.
func (b *Bolt) List(ctx context.Context, prefix string) ([]KV, error) {
	if err := ctxErr(ctx, prefix); err != nil {
		return nil, err
	}
	var out []KV
	p := []byte(prefix)
	err := b.view(func(bk *bolt.Bucket) error {
		c := bk.Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			out = append(out, decodeKV(string(k), v))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("prefix %q: %w", prefix, err)
	}
	return out, nil
}

// CompareAndSwap writes value only if key's ModRev is rev (0: key must not
// exist); otherwise it returns errdefs.ErrConflict.
func (b *Bolt) CompareAndSwap(ctx context.Context, key string, rev int64, value []byte, opts ...PutOption) (int64, error) {
	if err := checkWrite(ctx, key); err != nil {
		return 0, err
	}
	o := putOptions(opts)
	var out int64
	err := b.update(func(t *boltTx) error {
		old, exists := t.get(key)
		switch {
		case rev == 0 && exists:
			return fmt.Errorf("key %q: exists at revision %d: %w", key, old.ModRev, errdefs.ErrConflict)
		case rev != 0 && !exists:
			return fmt.Errorf("key %q: want revision %d, key does not exist: %w", key, rev, errdefs.ErrConflict)
		case rev != 0 && old.ModRev != rev:
			return fmt.Errorf("key %q: want revision %d, have %d: %w", key, rev, old.ModRev, errdefs.ErrConflict)
		}
		var err error
		out, err = t.put(key, value, o.Lease)
		return err
	})
	if err != nil {
		return 0, wrapKey(key, err)
	}
	return out, nil
}

func putOptions(opts []PutOption) PutOptions {
	var o PutOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// checkWrite rejects an empty key and an ended ctx.
func checkWrite(ctx context.Context, key string) error {
	if key == "" {
		return errdefs.Invalid("key", "must not be empty")
	}
	return ctxErr(ctx, key)
}

// wrapKey names the key in errors that do not yet name it (a closed store).
func wrapKey(key string, err error) error {
	if err == errClosed {
		return fmt.Errorf("key %q: %w", key, err)
	}
	return err
}
