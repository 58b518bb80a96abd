// Package resilience is the resilience benchmark suite: under a bounded
// load loop through the proxy, the replacement of a replica killed with
// SIGKILL, a rolling upgrade of three replicas, a rollback and a daemon
// killed under load, each with the requests that failed during it.
package resilience

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/loadloop"
)

func init() {
	bench.Register(bench.Suite{Name: "resilience", Title: "Resilience: a killed replica, a rolling upgrade and a rollback under load", Run: Resilience})
}

// The resilience suite's daemon network and cgroup parent, apart from the
// other suites'.
var resilienceNet = kit.DaemonNet{Bridge: "shoalbr0", Subnet: "10.188.0.0/16", CgroupParent: "/shoal-bench-resilience"}

// env is the suite's daemon and apps, with the suite's own steps.
type env struct{ *kit.ServingEnv }

// Row names of the resilience tables.
const (
	rsKill     = "SIGKILL of 1 of 2 ready replicas"
	rsRollout  = "rolling upgrade of 3 replicas"
	rsRollback = "rollback to the previous revision"
	rsCold     = "cold start of a replica beside the same load (baseline)"
)

// Steady time of the load loop before and after each disruption.
const (
	rsBefore = 200 * time.Millisecond
	rsAfter  = 300 * time.Millisecond
)

// resRun is what one measured run saw besides its timed value.
type resRun struct {
	total, failed int
	first         string  // the first failure
	cmd           float64 // ms the CLI command took, where there is one
}

// Resilience runs the resilience suite: under a bounded load loop through
// the proxy, the replacement of a replica killed with SIGKILL, a rolling
// upgrade of three replicas and a rollback, each with the requests that
// failed during it.
func Resilience(ctx context.Context, o bench.Options) (_ *bench.Report, retErr error) {
	if o.ShoalBin == "" {
		return nil, fmt.Errorf("resilience: the shoal binary under test is required")
	}
	rep := bench.NewReport(ctx, "resilience", "Resilience: a killed replica, a rolling upgrade and a rollback under load", o)
	dir, err := o.ScratchDir("resilience")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	se, err := kit.NewServingEnv(ctx, o, dir, resilienceNet, "hello")
	if err != nil {
		return nil, fmt.Errorf("resilience: %w", err)
	}
	e := &env{se}
	defer func() {
		if err := e.Close(context.WithoutCancel(ctx)); err != nil && retErr == nil {
			retErr = fmt.Errorf("resilience: %w", err)
		}
	}()
	rep.Para("Every figure here comes from one run of the real `shoal daemon` (runc, an embedded store, replicas on its own bridge) "+
		"and its proxy on loopback, with the example app *hello*. During each disruption a load loop sends `GET /` through the proxy "+
		"(Host: `<app>.localhost`) from %d clients, each waiting %s between an answer and its next request (bounded: at most %s and "+
		"%d requests per run); it starts %s before the disruption and runs on %s after it is over. hello names the replica in every answer, "+
		"which tells when traffic reaches a new replica. Every run uses a fresh app, so no run inherits another's crash back-off or revisions.",
		loopClients, loopPause, loopMaxTime, loopMaxTotal, rsBefore, rsAfter)

	warmup, runs := 1, o.RunsOr(10, 2)
	side := map[string][]resRun{}
	subject := func(name, command string, run func(ctx context.Context, app string) (float64, resRun, error)) bench.Subject {
		return bench.Subject{Name: name, Command: command, Run: func(ctx context.Context, i int) (float64, error) {
			v, r, err := run(ctx, fmt.Sprintf("res-%d", i))
			if err != nil {
				return 0, err
			}
			side[name] = append(side[name], r)
			return v, nil
		}}
	}
	rows, err := bench.Measure(ctx, o, warmup, runs, []bench.Subject{
		subject(rsCold, "GET / of an app with min = 0 through the proxy, to the first byte, while the loop loads another app of 2 replicas", e.coldOnce),
		subject(rsKill, "kill -KILL <pid of a ready replica>; until a new replica answers through the proxy", e.killOnce),
		subject(rsRollout, "shoal app deploy -f shoal.toml (new [env]); until 3 new replicas answer and no old one serves", e.rolloutOnce),
		subject(rsRollback, "shoal app rollback APP; until requests reach the previous revision only", e.rollbackOnce),
		subject(rsDaemon, "kill -KILL <daemon pid>; shoal daemon (same folders); until both replicas are listed ready again", e.daemonKillOnce),
	})
	if err != nil {
		return rep, fmt.Errorf("resilience: %w", err)
	}
	for name, rs := range side {
		side[name] = rs[min(warmup, len(rs)):]
	}
	e.renderResilience(rep, rows, side)
	e.daemonKillNote(rep, rows, side)
	return rep, nil
}

// twoReady deploys app with two replicas and returns them once both are
// ready; on success the caller removes the app.
func (e *env) twoReady(ctx context.Context, app string) ([]types.Replica, error) {
	if err := e.Deploy(ctx, app, "image = \"hello:1\"\n[scale]\nmin = 2\nmax = 2\n"); err != nil {
		return nil, err
	}
	ready, err := e.readyReplicas(ctx, app, 2)
	if err != nil {
		e.Remove(context.WithoutCancel(ctx), app)
		return nil, err
	}
	return ready, nil
}

// killOnce deploys app with two ready replicas, starts the load loop, kills
// one replica's process with SIGKILL and returns the milliseconds until a
// new replica answered through the proxy.
func (e *env) killOnce(ctx context.Context, app string) (float64, resRun, error) {
	ready, err := e.twoReady(ctx, app)
	if err != nil {
		return 0, resRun{}, err
	}
	defer e.Remove(context.WithoutCancel(ctx), app)
	victim, other := ready[0], ready[1]
	l, err := e.loadOn(ctx, app, victim.ID, other.ID)
	if err != nil {
		return 0, resRun{}, err
	}
	defer l.End()
	t0 := time.Now()
	if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
		return 0, resRun{}, fmt.Errorf("app %q: kill replica %s (pid %d): %w", app, victim.ID, victim.Pid, err)
	}
	at, err := l.WaitAnswer(ctx, 30*time.Second, fmt.Sprintf("app %q: a replacement answers", app), func(r string) bool {
		return r != "" && r != victim.ID && r != other.ID
	})
	if err != nil {
		return 0, resRun{}, err
	}
	time.Sleep(rsAfter)
	l.End()
	total, failed, first := l.Counts()
	return bench.Millis(at.Sub(t0))[0], resRun{total: total, failed: failed, first: first}, nil
}

// coldOnce deploys app with two ready replicas, as killOnce does, and
// app-cold with none; with the load loop on app it times a first request
// to app-cold, which waits for a cold start: what a killed replica's
// replacement cannot beat.
func (e *env) coldOnce(ctx context.Context, app string) (float64, resRun, error) {
	if err := e.Deploy(ctx, app, "image = \"hello:1\"\n[scale]\nmin = 2\nmax = 2\n"); err != nil {
		return 0, resRun{}, err
	}
	defer e.Remove(context.WithoutCancel(ctx), app)
	cold := app + "-cold"
	if err := e.Deploy(ctx, cold, "image = \"hello:1\"\n[scale]\nmin = 0\nmax = 1\n"); err != nil {
		return 0, resRun{}, err
	}
	defer e.Remove(context.WithoutCancel(ctx), cold)
	ready, err := e.readyReplicas(ctx, app, 2)
	if err != nil {
		return 0, resRun{}, err
	}
	l, err := e.loadOn(ctx, app, ids(ready)...)
	if err != nil {
		return 0, resRun{}, err
	}
	defer l.End()
	first, _, _, err := e.Request(ctx, cold, "/")
	if err != nil {
		return 0, resRun{}, err
	}
	time.Sleep(rsAfter)
	l.End()
	total, failed, firstErr := l.Counts()
	return bench.Millis(first)[0], resRun{total: total, failed: failed, first: firstErr}, nil
}

// readyReplicas waits until app has n ready replicas and returns them.
func (e *env) readyReplicas(ctx context.Context, app string, n int) ([]types.Replica, error) {
	var ready []types.Replica
	err := e.WaitFor(ctx, app, 60*time.Second, fmt.Sprintf("%d ready", n), func(a types.App) bool {
		ready = ready[:0]
		for _, r := range a.Replicas {
			if r.State == "ready" {
				ready = append(ready, r)
			}
		}
		return len(ready) == n
	})
	return ready, err
}

// loadOn starts the load loop on app, waits until every one of ids has
// answered and lets it run steadily for rsBefore.
func (e *env) loadOn(ctx context.Context, app string, ids ...string) (*loadloop.Loop, error) {
	l, err := e.startLoop(ctx, app)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, err := l.WaitAnswer(ctx, 10*time.Second, fmt.Sprintf("app %q: replica %s answers", app, id), func(r string) bool { return r == id }); err != nil {
			l.End()
			return nil, err
		}
	}
	time.Sleep(rsBefore)
	return l, nil
}

// manifest writes app's shoal.toml with three hello replicas greeting with
// greeting, and returns its path.
func (e *env) manifest(app, greeting string) (string, error) {
	path := filepath.Join(e.Dir, "manifests", app+"-"+greeting+".toml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	doc := fmt.Sprintf("name = %q\nimage = \"hello:1\"\n[scale]\nmin = 3\nmax = 3\n[env]\nGREETING = %q\n", app, greeting)
	return path, os.WriteFile(path, []byte(doc), 0o644)
}

// deployFile runs `shoal app deploy -f path` for app and returns how long
// the command took.
func (e *env) deployFile(ctx context.Context, app, path string) (time.Duration, error) {
	e.Mu.Lock()
	e.Apps[app] = true
	e.Mu.Unlock()
	return e.Daemon.CLI(ctx, "app", "deploy", "-f", path)
}
