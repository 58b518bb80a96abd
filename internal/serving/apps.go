package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/store"
)

// Deploy creates an app or gives it a new revision. The image must exist;
// replicas start on demand (or at once for min > 0).
func (m *Manager) Deploy(ctx context.Context, req types.DeployRequest) (types.App, error) {
	cfg, err := m.deploy(ctx, req)
	if err != nil {
		return types.App{}, err
	}
	return m.Get(ctx, cfg.Name)
}

// deploy writes the app's record (and its new revision's) and hands it to
// the app's controller. A new revision rolls out beside the one in
// service.
func (m *Manager) deploy(ctx context.Context, req types.DeployRequest) (manifest.Config, error) {
	file := req.File
	if file == "" {
		file = "shoal.toml"
	}
	cfg, err := manifest.Parse([]byte(req.Manifest), file)
	if err != nil {
		return manifest.Config{}, err
	}
	img, err := m.o.Images.Get(ctx, cfg.Image)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return manifest.Config{}, errdefs.Invalid("image", "%s: image %q is not in the image store; build, import or pull it first", file, cfg.Image)
		}
		return manifest.Config{}, fmt.Errorf("%s: image %q: %w", file, cfg.Image, err)
	}
	if w := cfg.EntrypointWarning(img.Config.Entrypoint); w != "" {
		m.emit("warning", cfg.Name, "", file+": "+w, nil)
	}
	now := m.clock.Now()
	l, err := m.leading()
	if err != nil {
		return manifest.Config{}, err
	}
	m.mu.Lock()
	ctl := m.apps[cfg.Name]
	m.mu.Unlock()
	if ctl != nil {
		l = ctl.lead
	}
	if ctl != nil {
		// ctl.recMu keeps the writer from writing an older record after
		// this one.
		ctl.recMu.Lock()
		defer ctl.recMu.Unlock()
	}
	for {
		rec := appRecord{Created: now}
		var base uint64 // the record's generation
		if ctl != nil {
			ctl.mu.Lock()
			deleting := ctl.deleting
			rec, base = ctl.rec, ctl.gen
			ctl.unlock()
			if deleting {
				return manifest.Config{}, fmt.Errorf("app %q is being deleted: %w", cfg.Name, errdefs.ErrConflict)
			}
		}
		wasSticky := rec.Sticky
		rec, rv, newRev := nextRecord(rec, cfg, req.Manifest, img.Digest, now)
		// The records are written without ctl.mu.
		if newRev {
			if err := putJSON(ctx, l, store.RevisionKey(cfg.Name, rec.Revision), rv); err != nil {
				return manifest.Config{}, err
			}
		}
		if err := putJSON(ctx, l, store.AppKey(cfg.Name), rec); err != nil {
			return manifest.Config{}, err
		}
		if ctl == nil {
			ctl = newAppCtl(m, rec, l)
			ctl.revs[rec.Revision] = rv
			m.mu.Lock()
			if other := m.apps[cfg.Name]; other != nil {
				m.mu.Unlock()
				return manifest.Config{}, fmt.Errorf("app %q: deployed twice at once: %w", cfg.Name, errdefs.ErrConflict)
			}
			if m.lead != l {
				m.mu.Unlock()
				return manifest.Config{}, m.errNotLeader()
			}
			m.apps[cfg.Name] = ctl
			m.mu.Unlock()
			if err := os.MkdirAll(ctl.logs.dir, 0o700); err != nil {
				return manifest.Config{}, fmt.Errorf("app %q: %w", cfg.Name, err)
			}
			m.run(ctl)
			m.emit("deploy", cfg.Name, "", fmt.Sprintf("created at revision %d (%s)", rec.Revision, cfg.Image), nil)
			ctl.mu.Lock()
			ctl.publish()
			ctl.unlock()
			break
		}
		ctl.mu.Lock()
		if ctl.gen != base {
			// A reconcile round changed the record while it was written
			// (a rollout moved on): the deploy applies to that one.
			ctl.unlock()
			continue
		}
		ctl.rec = rec
		ctl.recChanged()
		ctl.revs[rec.Revision] = rv
		if newRev {
			ctl.roFailures = 0
		}
		if err := ctl.scaler.d.SetPolicy(policy(rec)); err != nil {
			m.log.Warn("serving: autoscale policy", "app", cfg.Name, "err", err)
		}
		ctl.publish()
		ctl.unlock()
		if newRev {
			m.emit("deploy", cfg.Name, "", fmt.Sprintf("revision %d (%s)", rec.Revision, cfg.Image), nil)
			m.emit("rollout", cfg.Name, "", fmt.Sprintf("revision %d: rolling out, traffic stays on %s until it is ready",
				rec.Revision, trafficString(rec.Traffic)), nil)
		}
		if rec.Sticky != wasSticky {
			m.emit("traffic", cfg.Name, "", fmt.Sprintf("sticky %v by %s ([traffic] sticky)", rec.Sticky, file), nil)
		}
		break
	}
	ctl.notify()
	return cfg, nil
}

// nextRecord is app record rec after a deploy of cfg (its manifest text
// and image digest), with the revision the deploy makes, and whether
// that revision is new.
func nextRecord(rec appRecord, cfg manifest.Config, text, digest string, now time.Time) (appRecord, revisionRecord, bool) {
	hash := cfg.Hash()
	prev := rec.Revision
	newRev := prev == 0 || rec.Hash != hash || rec.Digest != digest
	if newRev {
		rec.Revision++
		// Traffic stays where it is until the new revision is ready. A
		// rollout cut short whose revision never took traffic leaves it
		// where that rollout started; a new app's first revision takes
		// the traffic from its deploy, ready or not, so it is the one.
		from := prev
		if ro := rec.Rollout; progressing(ro) && ro.Revision == prev && !takesTraffic(rec.Traffic, prev) {
			from = ro.From
		}
		if len(rec.Traffic) == 0 {
			serving := prev
			if prev == 0 {
				serving = rec.Revision // a new app: nothing to wait for
			}
			rec.Traffic = []trafficShare{{Revision: serving, Percent: 100}}
		}
		rec.Rollout = &rollout{Revision: rec.Revision, From: from, State: rolloutProgressing, StartedAt: now}
	}
	rec.Config, rec.Manifest, rec.Digest, rec.Hash, rec.Updated = cfg, text, digest, hash, now
	rec.Min, rec.Max = cfg.Scale.Min, cfg.Scale.Max
	// The last of a deploy and a traffic call sets the stickiness.
	rec.Sticky = cfg.Traffic.Sticky
	rv := revisionRecord{N: rec.Revision, Config: cfg, Manifest: text, Digest: digest, Hash: hash, Created: now}
	return rec, rv, newRev
}

// takesTraffic reports whether revision rev, the current one, has a share
// of ts (with no shares at all, everything goes to the current one).
func takesTraffic(ts []trafficShare, rev int) bool {
	if len(ts) == 0 {
		return true
	}
	for _, t := range ts {
		if t.Revision == rev && t.Percent > 0 {
			return true
		}
	}
	return false
}

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
	if req.Min != nil {
		rec.Min = *req.Min
	}
	if req.Max != nil {
		rec.Max = *req.Max
	}
	switch {
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
