package cluster

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// CompareAndSwap writes key only while the term lasts and only if the key's
// ModRev is still rev (0: the key must not exist). A changed key returns an
// error wrapping errdefs.ErrConflict; a term that is over, one wrapping
// ErrDeposed (which is a conflict too).
func (t *EtcdTerm) CompareAndSwap(ctx context.Context, key string, rev int64, value []byte) (int64, error) {
	resp, err := t.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(t.Key), "=", t.Rev),
			clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(t.Key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("key %q: %w", key, err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || kvs[0].CreateRevision != t.Rev {
		return 0, fmt.Errorf("key %q: leadership %s@%d: %w", key, t.Key, t.Rev, ErrDeposed)
	}
	return 0, fmt.Errorf("key %q: changed since revision %d: %w", key, rev, errdefs.ErrConflict)
}
