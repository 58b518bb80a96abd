package serving

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/shoal-run/shoal/internal/store"
)

// writer writes replica records to the store off the request path: state
// changes (a thaw above all) never wait for the store's fsync. One writer
// per app keeps each key's writes in order.
func (ctl *appCtl) writer() {
	for {
		select {
		case <-ctl.stop:
			ctl.flush()
			return
		case <-ctl.dirty:
			ctl.flush()
		}
	}
}

// flush writes the app record if it changed, and every dirty replica
// record (or deletes it); then the routes held until the store holds
// what was decided before it began go out (see hold).
func (ctl *appCtl) flush() {
	ctl.recMu.Lock()
	ctl.mu.Lock()
	upto := ctl.holds
	var appVal []byte
	if ctl.appDirty && !ctl.deleting {
		appVal, _ = json.Marshal(ctl.rec)
	}
	ctl.appDirty = false
	type op struct {
		id  string
		val []byte
	}
	ops := make([]op, 0, len(ctl.unsaved))
	for id := range ctl.unsaved {
		o := op{id: id}
		if r := ctl.reps[id]; r != nil {
			o.val, _ = json.Marshal(r.rec)
		}
		ops = append(ops, o)
	}
	clear(ctl.unsaved)
	ctl.unlock()
	ctx := context.Background()
	if appVal != nil {
		if err := ctl.lead.put(ctx, store.AppKey(ctl.name), appVal); err != nil {
			ctl.m.log.Error("serving: write app record", "app", ctl.name, "err", err)
		}
	}
	for _, o := range ops {
		key := store.ReplicaKey(ctl.name, o.id)
		var err error
		if o.val == nil {
			err = ctl.lead.del(ctx, key)
		} else {
			err = ctl.lead.put(ctx, key, o.val)
		}
		if err != nil {
			ctl.m.log.Error("serving: write replica record", "key", key, "err", err)
		}
	}
	ctl.recMu.Unlock()
	// Out even when a write failed: the app is not left without routes.
	ctl.release(upto)
}

// loadRevisions reads every revision of the app from the store, so that
// the controller never waits for the store under ctl.mu: revisions are
// immutable, and a deploy adds its own.
func (ctl *appCtl) loadRevisions(ctx context.Context) error {
	kvs, err := ctl.m.o.Store.List(ctx, store.RevisionsPrefix(ctl.name))
	if err != nil {
		return fmt.Errorf("app %q: list revisions: %w", ctl.name, err)
	}
	revs := make(map[int]revisionRecord, len(kvs))
	for _, kv := range kvs {
		var rv revisionRecord
		if err := json.Unmarshal(kv.Value, &rv); err != nil {
			ctl.m.log.Error("serving: unreadable revision record; skipped", "key", kv.Key, "err", err)
			continue
		}
		revs[rv.N] = rv
	}
	ctl.mu.Lock()
	for n, rv := range revs {
		ctl.revs[n] = rv
	}
	ctl.unlock()
	return nil
}
