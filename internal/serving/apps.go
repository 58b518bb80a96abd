package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/store"
)

// Scale changes an app's bounds.
func (m *Manager) Scale(ctx context.Context, name string, req types.ScaleRequest) (types.App, error) {
	ctl := m.app(name)
	if ctl == nil {
		return types.App{}, m.noApp(name)
	}
	ctl.recMu.Lock()
	defer ctl.recMu.Unlock()
	ctl.mu.Lock()
	rec := ctl.rec
	ctl.unlock()
	if st := rec.Config.Stateful; st.Enabled() {
		// A stateful app runs a count of ordinals: min and max are one.
		n, err := statefulCount(req, st.AllowZero)
		if err != nil {
			return types.App{}, err
		}
		rec.Min, rec.Max = n, n
	} else if req.Min != nil {
		rec.Min = *req.Min
	}
	if req.Max != nil && !rec.Config.Stateful.Enabled() {
		rec.Max = *req.Max
	}
	switch {
	case rec.Config.Stateful.Enabled():
	case rec.Min < 0:
		return types.App{}, errdefs.Invalid("min", "%d must not be negative", rec.Min)
	case rec.Max < 1 || rec.Max > 1000:
		return types.App{}, errdefs.Invalid("max", "%d must be from 1 to 1000", rec.Max)
	case rec.Min > rec.Max:
		return types.App{}, errdefs.Invalid("min", "%d is above max %d", rec.Min, rec.Max)
	}
	ctl.mu.Lock()
	ctl.rec.Min, ctl.rec.Max, ctl.rec.Updated = rec.Min, rec.Max, m.clock.Now()
	ctl.recChanged()
	rec = ctl.rec
	ctl.unlock()
	if err := putJSON(ctx, ctl.lead, store.AppKey(name), rec); err != nil {
		return types.App{}, err
	}
	ctl.mu.Lock()
	if err := ctl.scaler.d.SetPolicy(policy(ctl.rec)); err != nil {
		ctl.m.log.Warn("serving: autoscale policy", "app", name, "err", err)
	}
	ctl.unlock()
	m.emit("scale", name, "", fmt.Sprintf("bounds set to min %d, max %d", rec.Min, rec.Max), nil)
	ctl.notify()
	return m.Get(ctx, name)
}

// Remove deletes an app: its route answers 503 at once, its replicas drain
// and stop, then its records, logs and state are removed; its volumes
// stay (the API removes them when asked).
func (m *Manager) Remove(ctx context.Context, name string) error {
	ctl := m.app(name)
	if ctl == nil {
		return m.noApp(name)
	}
	ctl.recMu.Lock()
	ctl.mu.Lock()
	if ctl.deleting {
		ctl.unlock()
		ctl.recMu.Unlock()
		return fmt.Errorf("app %q is already being deleted: %w", name, errdefs.ErrConflict)
	}
	ctl.deleting = true
	ctl.rec.Deleting = true
	ctl.recChanged()
	rec := ctl.rec
	ctl.publish()
	ctl.unlock()
	err := putJSON(ctx, ctl.lead, store.AppKey(name), rec)
	ctl.recMu.Unlock()
	if err != nil {
		return err
	}
	m.emit("remove", name, "", "app deleted", nil)
	return m.finishRemove(ctl)
}

// finishRemove stops every replica of a deleted app and removes its state.
func (m *Manager) finishRemove(ctl *appCtl) error {
	ctl.mu.Lock()
	var reps []*replica
	for _, r := range ctl.reps {
		reps = append(reps, r)
		ctl.move(r, mvDelete, "", nil)
	}
	grace, stop := ctl.rec.Config.Scale.DrainTimeout.Duration, ctl.rec.Config.StopGrace()
	ctl.dropCheckpoint()
	ctl.publish()
	ctl.unlock()
	done := make(chan struct{}, len(reps))
	for _, r := range reps {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			ctl.node.Drain(ctx, r.rec.ID, grace)
			cancel()
			ctl.halt(r, stop)
			done <- struct{}{}
		}()
	}
	for range reps {
		<-done
	}
	ctl.closePremade()
	m.forgetPremade(ctl)
	ctl.close()
	ctl.merge.wg.Wait() // a merge in progress stops before the volumes go
	ctl.flush()
	ctx := context.Background()
	var errs []error
	for _, prefix := range []string{store.ReplicasPrefix(ctl.name), store.RevisionsPrefix(ctl.name)} {
		kvs, err := m.o.Store.List(ctx, prefix)
		errs = append(errs, err)
		for _, kv := range kvs {
			errs = append(errs, ctl.lead.del(ctx, kv.Key))
		}
	}
	errs = append(errs, ctl.lead.del(ctx, store.AppKey(ctl.name)))
	errs = append(errs, removeAppDir(m.appDir(ctl.name)))
	if m.o.Confiner != nil {
		// After the app's files: its ids are free for another app.
		errs = append(errs, m.o.Confiner.Release(ctx, ctl.name))
	}
	ctl.pub.remove(m.o.Router, ctl.name)
	m.mu.Lock()
	if m.apps[ctl.name] == ctl {
		delete(m.apps, ctl.name)
	}
	m.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("app %q: remove: %w", ctl.name, err)
	}
	return nil
}

// putJSON writes v at key through lead l.
func putJSON(ctx context.Context, l *lead, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if err := l.put(ctx, key, b); err != nil {
		return fmt.Errorf("store %s: %w", key, err)
	}
	return nil
}

// statefulCount is the count of ordinals a scale request asks of a
// stateful app: max, or min, or both when they are equal; 0 only when
// allowZero.
func statefulCount(req types.ScaleRequest, allowZero bool) (int, error) {
	var n int
	switch {
	case req.Min != nil && req.Max != nil && *req.Min != *req.Max:
		return 0, errdefs.Invalid("min", "a stateful app runs a count of ordinals: give max alone (or min equal to it), not %d-%d", *req.Min, *req.Max)
	case req.Max != nil:
		n = *req.Max
	case req.Min != nil:
		n = *req.Min
	default:
		return 0, errdefs.Invalid("max", "is required: the count of ordinals of the stateful app")
	}
	switch {
	case n == 0 && !allowZero:
		return 0, errdefs.Invalid("max", "a stateful app does not scale to zero unless its [stateful] table says allow_zero = true")
	case n < 0 || n > manifest.MaxReplicas:
		return 0, errdefs.Invalid("max", "%d must be from 1 to %d", n, manifest.MaxReplicas)
	}
	return n, nil
}
