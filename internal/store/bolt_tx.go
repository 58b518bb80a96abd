package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/shoal-run/shoal/internal/errdefs"
)

const headerLen = 24

// boltTx is one write transaction: it hands out revisions and collects the
// events to publish once the transaction commits.
type boltTx struct {
	tx        *bolt.Tx
	meta      *bolt.Bucket
	kv        *bolt.Bucket
	leases    *bolt.Bucket
	leaseKeys *bolt.Bucket
	rev       int64
	events    []Event
}

func openTx(tx *bolt.Tx) (*boltTx, error) {
	t := &boltTx{tx: tx}
	for _, b := range []struct {
		name []byte
		dst  **bolt.Bucket
	}{{bucketMeta, &t.meta}, {bucketKV, &t.kv}, {bucketLeases, &t.leases}, {bucketLeaseKeys, &t.leaseKeys}} {
		bk, err := tx.CreateBucketIfNotExists(b.name)
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", b.name, err)
		}
		*b.dst = bk
	}
	if raw := t.meta.Get(metaRev); raw != nil {
		t.rev = int64(binary.BigEndian.Uint64(raw))
	}
	return t, nil
}

// get returns the key's current KV, or ok false.
func (t *boltTx) get(key string) (KV, bool) {
	raw := t.kv.Get([]byte(key))
	if raw == nil {
		return KV{}, false
	}
	return decodeKV(key, raw), true
}

// put writes key at the next revision and records a put event.
func (t *boltTx) put(key string, value []byte, lease LeaseID) (int64, error) {
	if lease != 0 && t.leases.Get(u64(int64(lease))) == nil {
		return 0, fmt.Errorf("key %q: lease %d: %w", key, lease, errdefs.ErrNotFound)
	}
	old, exists := t.get(key)
	t.rev++
	kv := KV{Key: key, Value: append([]byte(nil), value...), CreateRev: t.rev, ModRev: t.rev, Lease: lease}
	if exists {
		kv.CreateRev = old.CreateRev
		if old.Lease != 0 && old.Lease != lease {
			if err := t.leaseKeys.Delete(leaseKey(old.Lease, key)); err != nil {
				return 0, fmt.Errorf("key %q: %w", key, err)
			}
		}
	}
	if lease != 0 {
		if err := t.leaseKeys.Put(leaseKey(lease, key), nil); err != nil {
			return 0, fmt.Errorf("key %q: %w", key, err)
		}
	}
	if err := t.kv.Put([]byte(key), encodeKV(kv)); err != nil {
		return 0, fmt.Errorf("key %q: %w", key, err)
	}
	t.events = append(t.events, Event{Type: EventPut, KV: kv})
	return t.rev, nil
}

// del removes key at the next revision and records a delete event.
func (t *boltTx) del(key string) error {
	old, exists := t.get(key)
	if !exists {
		return fmt.Errorf("key %q: %w", key, errdefs.ErrNotFound)
	}
	if old.Lease != 0 {
		if err := t.leaseKeys.Delete(leaseKey(old.Lease, key)); err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
	}
	if err := t.kv.Delete([]byte(key)); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	t.rev++
	t.events = append(t.events, Event{Type: EventDelete, KV: KV{Key: key, ModRev: t.rev}})
	return nil
}

// dropLease deletes the lease record and every key attached to it.
func (t *boltTx) dropLease(id LeaseID) error {
	prefix := u64(int64(id))
	var keys []string
	c := t.leaseKeys.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, string(k[len(prefix):]))
	}
	for _, k := range keys {
		if err := t.del(k); err != nil {
			return fmt.Errorf("lease %d: %w", id, err)
		}
	}
	if err := t.leases.Delete(prefix); err != nil {
		return fmt.Errorf("lease %d: %w", id, err)
	}
	return nil
}

func encodeKV(kv KV) []byte {
	buf := make([]byte, headerLen+len(kv.Value))
	binary.BigEndian.PutUint64(buf[0:], uint64(kv.CreateRev))
	binary.BigEndian.PutUint64(buf[8:], uint64(kv.ModRev))
	binary.BigEndian.PutUint64(buf[16:], uint64(kv.Lease))
	copy(buf[headerLen:], kv.Value)
	return buf
}

// decodeKV copies a stored value out of bbolt's memory.
func decodeKV(key string, raw []byte) KV {
	if len(raw) < headerLen {
		return KV{Key: key}
	}
	return KV{
		Key:       key,
		CreateRev: int64(binary.BigEndian.Uint64(raw[0:])),
		ModRev:    int64(binary.BigEndian.Uint64(raw[8:])),
		Lease:     LeaseID(binary.BigEndian.Uint64(raw[16:])),
		Value:     append([]byte{}, raw[headerLen:]...),
	}
}

func leaseKey(id LeaseID, key string) []byte {
	return append(u64(int64(id)), key...)
}

func u64(n int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(n))
	return b
}
