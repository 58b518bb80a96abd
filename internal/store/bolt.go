package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// The bbolt file holds four buckets:
//
//	meta/
//	    rev         store-wide revision counter (8 bytes, big endian)
//	    lease-seq   last lease id handed out (8 bytes, big endian)
//	kv/
//	    <key>       24-byte header (CreateRev, ModRev, Lease) + value
//	leases/
//	    <id>        ttl in ns + deadline in unix ns (8 + 8 bytes)
//	lease-keys/
//	    <id><key>   empty; which keys a lease deletes when it ends
//
// The keys in kv follow the layout in keys.go, MetaSchemaKey included.
var (
	bucketMeta      = []byte("meta")
	bucketKV        = []byte("kv")
	bucketLeases    = []byte("leases")
	bucketLeaseKeys = []byte("lease-keys")

	metaRev      = []byte("rev")
	metaLeaseSeq = []byte("lease-seq")
)

// ErrNewerSchema is returned when a store was written by a newer shoal whose
// key layout this build does not know.
var ErrNewerSchema = errors.New("store schema is newer than this build supports")

var errClosed = fmt.Errorf("store is closed: %w", errdefs.ErrUnavailable)

// Bolt is the Store of a single host, kept in one bbolt file. Every write is
// one bbolt transaction, synced to disk before it returns. Watches are served
// in process; leases run on the Bolt's clock and are kept across restarts
// (each gets a fresh full TTL when the file is opened again).
type Bolt struct {
	db       *bolt.DB
	path     string
	clock    clock.Clock
	log      *slog.Logger
	watchBuf int

	// mu serializes writes, so that events reach watchers in revision
	// order, and guards everything below.
	mu       sync.Mutex
	closed   bool
	done     chan struct{}
	watchers map[*boltWatcher]struct{}
	leases   map[LeaseID]*boltLease
}

// BoltOption configures OpenBolt.
type BoltOption func(*boltConfig)

type boltConfig struct {
	clock       clock.Clock
	log         *slog.Logger
	watchBuf    int
	lockTimeout time.Duration
}

// WithClock sets the clock that leases run on (default: the wall clock).
func WithClock(c clock.Clock) BoltOption { return func(o *boltConfig) { o.clock = c } }

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) BoltOption { return func(o *boltConfig) { o.log = l } }

// WithWatchBuffer sets how many events a watcher may fall behind before its
// channel is closed (default 1024).
func WithWatchBuffer(n int) BoltOption { return func(o *boltConfig) { o.watchBuf = n } }

// WithLockTimeout sets how long OpenBolt waits for another process to release
// the file (default 5s).
func WithLockTimeout(d time.Duration) BoltOption { return func(o *boltConfig) { o.lockTimeout = d } }

// OpenBolt opens (creating if needed) the bbolt store at path, compacted
// first when more than half of it is free pages (compactIfSparse). It
// refuses a file whose schema is newer than SchemaVersion.
func OpenBolt(path string, opts ...BoltOption) (*Bolt, error) {
	cfg := boltConfig{clock: clock.Real{}, log: slog.Default(), watchBuf: 1024, lockTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.watchBuf < 1 {
		return nil, errdefs.Invalid("watch buffer", "must be at least 1, got %d", cfg.watchBuf)
	}
	bo := &bolt.Options{Timeout: cfg.lockTimeout}
	lock, err := openLock(path, cfg.lockTimeout)
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("bolt store %s: file is locked by another process: %w", path, errdefs.ErrUnavailable)
	}
	if err != nil {
		return nil, fmt.Errorf("bolt store %s: %w", path, err)
	}
	defer lock.Close()
	if ok, err := compactIfSparse(path, bo); err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("bolt store %s: file is locked by another process: %w", path, errdefs.ErrUnavailable)
		}
		cfg.log.Warn("store: not compacted", "path", path, "err", err)
	} else if ok {
		cfg.log.Info("store: compacted (more than half of it was free pages)", "path", path)
	}
	db, err := bolt.Open(path, 0o600, bo)
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("bolt store %s: file is locked by another process: %w", path, errdefs.ErrUnavailable)
		}
		return nil, fmt.Errorf("bolt store %s: %w", path, err)
	}
	b := &Bolt{
		db: db, path: path, clock: cfg.clock, log: cfg.log, watchBuf: cfg.watchBuf,
		done:     make(chan struct{}),
		watchers: map[*boltWatcher]struct{}{},
		leases:   map[LeaseID]*boltLease{},
	}
	if err := b.init(); err != nil {
		db.Close()
		return nil, fmt.Errorf("bolt store %s: %w", path, err)
	}
	return b, nil
}

// init creates the buckets, checks or writes the schema version and arms
// the timers of persisted leases.
func (b *Bolt) init() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var leases []leaseRec
	err := b.updateLocked(func(t *boltTx) error {
		raw := t.kv.Get([]byte(MetaSchemaKey))
		if raw == nil {
			if _, err := t.put(MetaSchemaKey, []byte(strconv.Itoa(SchemaVersion)), 0); err != nil {
				return err
			}
		} else {
			v, err := strconv.Atoi(string(decodeKV(MetaSchemaKey, raw).Value))
			if err != nil {
				return fmt.Errorf("key %q: bad schema version: %w", MetaSchemaKey, errdefs.ErrInvalid)
			}
			if v > SchemaVersion {
				return fmt.Errorf("schema version %d, this build knows %d: %w", v, SchemaVersion, ErrNewerSchema)
			}
		}
		var err error
		leases, err = t.restoreLeases(b.clock.Now())
		return err
	})
	if err != nil {
		return err
	}
	for _, l := range leases {
		b.armLocked(l.id, l.ttl, l.deadline)
	}
	return nil
}

// Path returns the file the store lives in.
func (b *Bolt) Path() string { return b.path }

// Close stops lease timers, closes every watch channel and closes the file.
func (b *Bolt) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.done)
	for _, l := range b.leases {
		l.timer.Stop()
	}
	for w := range b.watchers {
		delete(b.watchers, w)
		close(w.ch)
	}
	b.mu.Unlock()
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("bolt store %s: close: %w", b.path, err)
	}
	return nil
}

// update runs fn in one write transaction and then hands its events to the
// watchers.
func (b *Bolt) update(fn func(*boltTx) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.updateLocked(fn)
}

// updateLocked is update with b.mu held.
func (b *Bolt) updateLocked(fn func(*boltTx) error) error {
	if b.closed {
		return errClosed
	}
	var events []Event
	var fnErr error
	err := b.db.Update(func(tx *bolt.Tx) error {
		t, err := openTx(tx)
		if err != nil {
			return err
		}
		if fnErr = fn(t); fnErr != nil {
			return fnErr
		}
		events = t.events
		return t.meta.Put(metaRev, u64(t.rev))
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("bolt store %s: write: %w", b.path, err)
	}
	b.publishLocked(events)
	return nil
}

// view runs fn in a read transaction.
func (b *Bolt) view(fn func(kv *bolt.Bucket) error) error {
	return b.db.View(func(tx *bolt.Tx) error {
		kv := tx.Bucket(bucketKV)
		if kv == nil {
			return errClosed
		}
		return fn(kv)
	})
}

var _ Store = (*Bolt)(nil)

// ctxErr returns ctx's error, if it has ended, wrapped with the key.
func ctxErr(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	return nil
}
