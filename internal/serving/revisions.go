package serving

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// Rollback sends all of an app's traffic to an earlier revision (req.To, or
// the one before the current) at once and makes it the current one. Its
// frozen replicas thaw, as many as the app had in service; the rest
// start. The revision it leaves drains and stays frozen for
// rollback_grace. A stateful app's ordinals go back one at a time: its
// rollback progresses until every ordinal runs revision req.To.
func (m *Manager) Rollback(ctx context.Context, name string, req types.RollbackRequest) (types.App, error) {
	ctl := m.app(name)
	if ctl == nil {
		return types.App{}, m.noApp(name)
	}
	ctl.recMu.Lock()
	defer ctl.recMu.Unlock()
	ctl.mu.Lock()
	cur, deleting := ctl.rec.Revision, ctl.deleting
	ctl.unlock()
	if deleting {
		return types.App{}, fmt.Errorf("app %q is being deleted: %w", name, errdefs.ErrConflict)
	}
	to := req.To
	if to == 0 {
		revs, err := revisionNumbers(ctx, m.o.Store, name)
		if err != nil {
			return types.App{}, err
		}
		for _, n := range revs {
			if n < cur {
				to = n
			}
		}
		if to == 0 {
			return types.App{}, errdefs.Invalid("to", "app %q has no revision before %d to roll back to", name, cur)
		}
	}
	if err := ctl.fetchRevision(ctx, to); err != nil {
		if errdefs.IsNotFound(err) {
			return types.App{}, errdefs.Invalid("to", "app %q has no revision %d", name, to)
		}
		return types.App{}, err
	}
	load := m.o.Router.Load(name)
	ctl.mu.Lock()
	rv, err := ctl.revision(to)
	if err != nil {
		ctl.unlock()
		if errdefs.IsNotFound(err) {
			return types.App{}, errdefs.Invalid("to", "app %q has no revision %d", name, to)
		}
		return types.App{}, err
	}
	now := m.clock.Now()
	p := decideRollback(ctl.view(), load, to)
	from := ctl.rec.Revision
	ctl.setCurrent(rv)
	ctl.rec.Traffic = []trafficShare{{Revision: to, Percent: 100}}
	ctl.rec.Updated = now
	ctl.rec.Rollout = &rollout{Revision: to, From: from, State: rolloutDone, Want: p.want, StartedAt: now, DoneAt: &now,
		Reason: fmt.Sprintf("rolled back from revision %d by request", from)}
	if ctl.rec.Config.Stateful.Enabled() {
		// Its ordinals go back one at a time (decideStateful): the
		// rollback is done once every one runs revision to.
		ro := ctl.rec.Rollout
		ro.State, ro.DoneAt, ro.Requested = rolloutProgressing, nil, true
		ro.Reason = fmt.Sprintf("rolling back from revision %d by request, one ordinal at a time", from)
	}
	ctl.roFailures, ctl.failures, ctl.strikes, ctl.backoff = 0, 0, 0, time.Time{}
	// The revision's frozen replicas thaw, then what is missing starts;
	// the route changes with the first one.
	ctl.applySteps(now, p)
	thawed, started := p.count(stepThaw), p.count(stepStart)
	ctl.rec.Rollout.Ready = thawed
	ctl.publish()
	val, err := ctl.takeRecord()
	ctl.unlock()
	if err != nil {
		return types.App{}, err
	}
	m.emit("rollback", name, "", fmt.Sprintf("revision %d rolled back to revision %d by request: %d replicas thawed, %d started",
		from, to, thawed, started), map[string]float64{"thawed": float64(thawed), "started": float64(started)})
	ctl.notify()
	return m.storeApp(ctx, ctl, val)
}

// SetTraffic splits an app's requests between revisions by percent.
// Each revision with a share keeps at least one replica while the app is
// in use, and the autoscaler's count is split by the shares.
func (m *Manager) SetTraffic(ctx context.Context, name string, req types.TrafficRequest) (types.App, error) {
	ctl := m.app(name)
	if ctl == nil {
		return types.App{}, m.noApp(name)
	}
	if len(req.Traffic) == 0 {
		return types.App{}, errdefs.Invalid("traffic", "give at least one revision's percent")
	}
	seen := map[int]bool{}
	sum := 0
	var ts []trafficShare
	for i, t := range req.Traffic {
		switch {
		case t.Revision < 1:
			return types.App{}, errdefs.Invalid(fmt.Sprintf("traffic[%d].revision", i), "%d is not a revision number", t.Revision)
		case seen[t.Revision]:
			return types.App{}, errdefs.Invalid(fmt.Sprintf("traffic[%d].revision", i), "revision %d is given twice", t.Revision)
		case t.Percent < 0 || t.Percent > 100:
			return types.App{}, errdefs.Invalid(fmt.Sprintf("traffic[%d].percent", i), "%d must be from 0 to 100", t.Percent)
		}
		seen[t.Revision] = true
		sum += t.Percent
		if t.Percent > 0 {
			ts = append(ts, trafficShare{Revision: t.Revision, Percent: t.Percent})
		}
	}
	if sum != 100 {
		return types.App{}, errdefs.Invalid("traffic", "the percents add up to %d; they must add up to 100", sum)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Revision < ts[j].Revision })
	for i, t := range req.Traffic {
		if err := ctl.fetchRevision(ctx, t.Revision); err != nil {
			if errdefs.IsNotFound(err) {
				return types.App{}, errdefs.Invalid(fmt.Sprintf("traffic[%d].revision", i), "app %q has no revision %d", name, t.Revision)
			}
			return types.App{}, err
		}
	}
	ctl.recMu.Lock()
	defer ctl.recMu.Unlock()
	ctl.mu.Lock()
	if ctl.deleting {
		ctl.unlock()
		return types.App{}, fmt.Errorf("app %q is being deleted: %w", name, errdefs.ErrConflict)
	}
	for i, t := range req.Traffic {
		if _, err := ctl.revision(t.Revision); err != nil {
			ctl.unlock()
			if errdefs.IsNotFound(err) {
				return types.App{}, errdefs.Invalid(fmt.Sprintf("traffic[%d].revision", i), "app %q has no revision %d", name, t.Revision)
			}
			return types.App{}, err
		}
	}
	if ro := ctl.rec.Rollout; progressing(ro) {
		ctl.unlock()
		return types.App{}, fmt.Errorf("app %q: revision %d is rolling out; wait for it or roll back: %w", name, ro.Revision, errdefs.ErrConflict)
	}
	ctl.rec.Traffic, ctl.rec.Sticky, ctl.rec.Updated = ts, req.Sticky, m.clock.Now()
	ctl.publish()
	val, err := ctl.takeRecord()
	ctl.unlock()
	if err != nil {
		return types.App{}, err
	}
	why := "traffic " + trafficString(ts)
	if req.Sticky {
		why += ", sticky"
	}
	m.emit("traffic", name, "", why, nil)
	ctl.notify()
	return m.storeApp(ctx, ctl, val)
}

// storeApp writes the app record val of takeRecord and returns the app as
// it is now. ctl.recMu is held, ctl.mu is not.
func (m *Manager) storeApp(ctx context.Context, ctl *appCtl, val []byte) (types.App, error) {
	if err := ctl.lead.put(ctx, store.AppKey(ctl.name), val); err != nil {
		return types.App{}, fmt.Errorf("store %s: %w", store.AppKey(ctl.name), err)
	}
	return m.Get(ctx, ctl.name)
}

// revisionNumbers lists the app's revisions, in order.
func revisionNumbers(ctx context.Context, st store.Store, app string) ([]int, error) {
	kvs, err := st.List(ctx, store.RevisionsPrefix(app))
	if err != nil {
		return nil, fmt.Errorf("app %q: list revisions: %w", app, err)
	}
	var out []int
	for _, kv := range kvs {
		if n, err := strconv.Atoi(strings.TrimLeft(strings.TrimPrefix(kv.Key, store.RevisionsPrefix(app)), "0")); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}
