package resilience

import (
	"context"
	"fmt"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
)

// firstRevision deploys app's first revision, waits for its three ready
// replicas and writes the manifest of its second; on success the caller
// removes the app.
func (e *env) firstRevision(ctx context.Context, app string) (old []types.Replica, v2 string, err error) {
	v1, err := e.manifest(app, "v1")
	if err != nil {
		return nil, "", err
	}
	if _, err := e.deployFile(ctx, app, v1); err != nil {
		return nil, "", err
	}
	old, err = e.readyReplicas(ctx, app, 3)
	if err == nil {
		v2, err = e.manifest(app, "v2")
	}
	if err != nil {
		e.Remove(context.WithoutCancel(ctx), app)
		return nil, "", err
	}
	return old, v2, nil
}

// rolloutOnce deploys app with three ready replicas of a first revision,
// starts the load loop, deploys a second revision (another greeting) and
// returns the milliseconds from the deploy command until all three new
// replicas have answered through the proxy and no replica of the first
// revision serves (ready, draining or starting) any more.
func (e *env) rolloutOnce(ctx context.Context, app string) (float64, resRun, error) {
	old, v2, err := e.firstRevision(ctx, app)
	if err != nil {
		return 0, resRun{}, err
	}
	defer e.Remove(context.WithoutCancel(ctx), app)
	l, err := e.loadOn(ctx, app, ids(old)...)
	if err != nil {
		return 0, resRun{}, err
	}
	defer l.End()
	done := e.watch(ctx, app, 60*time.Second, func(a types.App) bool { return rolledOver(a, old[0].Revision) })
	t0 := time.Now()
	cmd, err := e.deployFile(ctx, app, v2)
	if err != nil {
		return 0, resRun{}, err
	}
	w := <-done
	if w.err != nil {
		return 0, resRun{}, fmt.Errorf("rollout: %w", w.err)
	}
	end := w.at
	for _, r := range w.app.Replicas {
		if r.State != "ready" {
			continue
		}
		at, err := l.WaitAnswer(ctx, 10*time.Second, fmt.Sprintf("app %q: new replica %s answers", app, r.ID), func(x string) bool { return x == r.ID })
		if err != nil {
			return 0, resRun{}, err
		}
		end = later(end, at)
	}
	time.Sleep(rsAfter)
	l.End()
	total, failed, first := l.Counts()
	return bench.Millis(end.Sub(t0))[0], resRun{total: total, failed: failed, first: first, cmd: bench.Millis(cmd)[0]}, nil
}

// rollbackOnce deploys app's first revision and then its second (both
// untimed, three replicas each), starts the load loop and runs `shoal app
// rollback`; it returns the milliseconds from the command until requests
// reach the first revision only: the later of the first request sent after
// the command that a replica of the first revision answered and the last
// one sent after the command that the second revision still answered.
func (e *env) rollbackOnce(ctx context.Context, app string) (float64, resRun, error) {
	old, v2, err := e.firstRevision(ctx, app)
	if err != nil {
		return 0, resRun{}, err
	}
	defer e.Remove(context.WithoutCancel(ctx), app)
	if _, err := e.deployFile(ctx, app, v2); err != nil {
		return 0, resRun{}, err
	}
	w := <-e.watch(ctx, app, 60*time.Second, func(a types.App) bool { return rolledOver(a, old[0].Revision) })
	if w.err != nil {
		return 0, resRun{}, fmt.Errorf("rollout before the rollback: %w", w.err)
	}
	newer := map[string]bool{}
	for _, r := range w.app.Replicas {
		if r.State == "ready" {
			newer[r.ID] = true
		}
	}
	l, err := e.loadOn(ctx, app, keys(newer)...)
	if err != nil {
		return 0, resRun{}, err
	}
	defer l.End()
	t0 := time.Now()
	cmd, err := e.Daemon.CLI(ctx, "app", "rollback", app)
	if err != nil {
		return 0, resRun{}, err
	}
	if _, err := l.WaitAnswer(ctx, 30*time.Second, fmt.Sprintf("app %q: the previous revision answers", app), func(r string) bool { return r != "" && !newer[r] }); err != nil {
		return 0, resRun{}, err
	}
	time.Sleep(rsAfter)
	l.End()
	var firstOld, lastNew time.Time
	for _, r := range l.Records() {
		if !r.OK || r.Start.Before(t0) {
			continue
		}
		if newer[r.Replica] {
			lastNew = later(lastNew, r.Start)
		} else if firstOld.IsZero() || r.Start.Before(firstOld) {
			firstOld = r.Start
		}
	}
	total, failed, first := l.Counts()
	return bench.Millis(later(firstOld, lastNew).Sub(t0))[0], resRun{total: total, failed: failed, first: first, cmd: bench.Millis(cmd)[0]}, nil
}

// rolledOver reports whether app has three ready replicas of a revision
// after from and none of from that serves or is about to.
func rolledOver(a types.App, from int) bool {
	fresh := 0
	for _, r := range a.Replicas {
		switch {
		case r.Revision > from && r.State == "ready":
			fresh++
		case r.Revision == from && (r.State == "ready" || r.State == "draining" || r.State == "starting" || r.State == "pending"):
			return false
		}
	}
	return fresh == 3
}

// watched is the outcome of watch: when the condition first held and the
// app then.
type watched struct {
	at  time.Time
	app types.App
	err error
}

// watch polls app's status every 10 ms in the background until cond holds
// or limit passes.
func (e *env) watch(ctx context.Context, app string, limit time.Duration, cond func(types.App) bool) <-chan watched {
	out := make(chan watched, 1)
	go func() {
		deadline := time.Now().Add(limit)
		for {
			a, err := e.Status(ctx, app)
			if err == nil && cond(a) {
				out <- watched{at: time.Now(), app: a}
				return
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				out <- watched{err: fmt.Errorf("app %q: not done after %s (state %s, %d ready, last error %v)", app, limit, a.State, a.Ready, err)}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return out
}

func ids(rs []types.Replica) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
