package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Etcd is the Store of a cluster, kept in etcd v3. Revisions are etcd's
// revisions, leases are etcd leases (their TTL is whole seconds, rounded up,
// and never below the server's minimum), and a Watch is an etcd watch that
// starts right after the store's revision at the time of the call.
type Etcd struct {
	cli       *clientv3.Client
	endpoints string
	log       *slog.Logger
}

// EtcdOption configures OpenEtcd.
type EtcdOption func(*etcdConfig)

type etcdConfig struct {
	dialTimeout time.Duration
	log         *slog.Logger
}

// WithDialTimeout bounds how long OpenEtcd waits for the cluster to answer
// (default 5s).
func WithDialTimeout(d time.Duration) EtcdOption {
	return func(o *etcdConfig) { o.dialTimeout = d }
}

// WithEtcdLogger sets the logger (default: slog.Default()).
func WithEtcdLogger(l *slog.Logger) EtcdOption { return func(o *etcdConfig) { o.log = l } }

// OpenEtcd connects to the etcd cluster at endpoints (host:port or URLs),
// writes the schema version into an empty store and refuses a store whose
// schema is newer than SchemaVersion.
func OpenEtcd(ctx context.Context, endpoints []string, opts ...EtcdOption) (*Etcd, error) {
	cfg := etcdConfig{dialTimeout: 5 * time.Second, log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	name := strings.Join(endpoints, ",")
	if len(endpoints) == 0 {
		return nil, errdefs.Invalid("endpoints", "at least one etcd endpoint is needed")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: cfg.dialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", name, err)
	}
	e := &Etcd{cli: cli, endpoints: name, log: cfg.log}
	octx, cancel := context.WithTimeout(ctx, cfg.dialTimeout)
	defer cancel()
	if err := e.checkSchema(octx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %s: %w", name, err)
	}
	return e, nil
}

// checkSchema writes SchemaVersion if the store has none and otherwise
// checks that this build can read the store.
func (e *Etcd) checkSchema(ctx context.Context) error {
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(MetaSchemaKey), "=", 0)).
		Then(clientv3.OpPut(MetaSchemaKey, strconv.Itoa(SchemaVersion))).
		Else(clientv3.OpGet(MetaSchemaKey)).
		Commit()
	if err != nil {
		return e.wrap(ctx, "key "+strconv.Quote(MetaSchemaKey), err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return fmt.Errorf("key %q: vanished while read: %w", MetaSchemaKey, errdefs.ErrConflict)
	}
	v, err := strconv.Atoi(string(kvs[0].Value))
	if err != nil {
		return fmt.Errorf("key %q: bad schema version %q: %w", MetaSchemaKey, kvs[0].Value, errdefs.ErrInvalid)
	}
	if v > SchemaVersion {
		return fmt.Errorf("schema version %d, this build knows %d: %w", v, SchemaVersion, ErrNewerSchema)
	}
	return nil
}

// Endpoints returns the endpoints the store was opened with, comma-separated.
func (e *Etcd) Endpoints() string { return e.endpoints }

// Client returns the underlying etcd client, for the parts of a cluster
// (such as leader election) that need more than the Store interface.
func (e *Etcd) Client() *clientv3.Client { return e.cli }

// Close closes the connection; open watch channels close with it.
func (e *Etcd) Close() error {
	if err := e.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("etcd %s: close: %w", e.endpoints, err)
	}
	return nil
}

// Get returns the key's value and revisions.
func (e *Etcd) Get(ctx context.Context, key string) (KV, error) {
	resp, err := e.cli.Get(ctx, key)
	if err != nil {
		return KV{}, e.wrap(ctx, "key "+strconv.Quote(key), err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, fmt.Errorf("key %q: %w", key, errdefs.ErrNotFound)
	}
	return fromEtcd(resp.Kvs[0]), nil
}

// Put writes value under key and returns the revision of the write.
func (e *Etcd) Put(ctx context.Context, key string, value []byte, opts ...PutOption) (int64, error) {
	if err := checkWrite(ctx, key); err != nil {
		return 0, err
	}
	resp, err := e.cli.Put(ctx, key, string(value), etcdPutOpts(opts)...)
	if err != nil {
		return 0, e.wrap(ctx, "key "+strconv.Quote(key), err)
	}
	return resp.Header.Revision, nil
}

// Delete removes key; a missing key is errdefs.ErrNotFound.
func (e *Etcd) Delete(ctx context.Context, key string) error {
	resp, err := e.cli.Delete(ctx, key)
	if err != nil {
		return e.wrap(ctx, "key "+strconv.Quote(key), err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("key %q: %w", key, errdefs.ErrNotFound)
	}
	return nil
}

// List returns every key under prefix in lexical order.
func (e *Etcd) List(ctx context.Context, prefix string) ([]KV, error) {
	resp, err := e.cli.Get(ctx, prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, e.wrap(ctx, "prefix "+strconv.Quote(prefix), err)
	}
	out := make([]KV, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, fromEtcd(kv))
	}
	return out, nil
}

// CompareAndSwap writes value only if key's ModRev is rev (0: key must not
// exist); otherwise it returns errdefs.ErrConflict.
func (e *Etcd) CompareAndSwap(ctx context.Context, key string, rev int64, value []byte, opts ...PutOption) (int64, error) {
	if err := checkWrite(ctx, key); err != nil {
		return 0, err
	}
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", rev)
	if rev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	resp, err := e.cli.Txn(ctx).If(cmp).
		Then(clientv3.OpPut(key, string(value), etcdPutOpts(opts)...)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return 0, e.wrap(ctx, "key "+strconv.Quote(key), err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		switch {
		case len(kvs) == 0:
			return 0, fmt.Errorf("key %q: want revision %d, key does not exist: %w", key, rev, errdefs.ErrConflict)
		case rev == 0:
			return 0, fmt.Errorf("key %q: exists at revision %d: %w", key, kvs[0].ModRevision, errdefs.ErrConflict)
		default:
			return 0, fmt.Errorf("key %q: want revision %d, have %d: %w", key, rev, kvs[0].ModRevision, errdefs.ErrConflict)
		}
	}
	return resp.Header.Revision, nil
}

func etcdPutOpts(opts []PutOption) []clientv3.OpOption {
	o := putOptions(opts)
	if o.Lease == 0 {
		return nil
	}
	return []clientv3.OpOption{clientv3.WithLease(clientv3.LeaseID(o.Lease))}
}

func fromEtcd(kv *mvccpb.KeyValue) KV {
	return KV{
		Key:       string(kv.Key),
		Value:     kv.Value,
		CreateRev: kv.CreateRevision,
		ModRev:    kv.ModRevision,
		Lease:     LeaseID(kv.Lease),
	}
}

// wrap names what an etcd error concerns and sorts it into a category: a
// missing lease is not found, an ended ctx stays itself, and anything else
// means the cluster could not serve the request.
func (e *Etcd) wrap(ctx context.Context, what string, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%s: lease: %w", what, errdefs.ErrNotFound)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case errors.Is(err, rpctypes.ErrEmptyKey):
		return fmt.Errorf("%s: %w", what, errdefs.ErrInvalid)
	}
	return fmt.Errorf("%s: etcd %s: %w: %w", what, e.endpoints, errdefs.ErrUnavailable, err)
}

var _ Store = (*Etcd)(nil)
