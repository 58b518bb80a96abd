package serving

import (
	"context"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// selfState is what the self API keeps of one replica.
type selfState struct {
	token   string // given to the container, then forgotten
	metrics map[string]metricSample
	settled chan struct{} // closed once a start is ready or failed
}

type metricSample struct {
	value float64
	at    time.Time
}

// maxMetrics bounds the metric names one replica may publish.
const maxMetrics = 16

// metricTTL is how long a published value counts for the autoscaler: an
// app that scales on its metric publishes it at least this often.
const metricTTL = 10 * time.Second

// settle wakes whoever waits for the replica's start. ctl.mu is held.
func (r *replica) settle() {
	if r.self.settled != nil {
		select {
		case <-r.self.settled:
		default:
			close(r.self.settled)
		}
	}
}

// SelfAPI returns the serving side of the self API.
func (m *Manager) SelfAPI() appapi.Platform { return selfAPI{m} }

// Record writes an event to the event log in the background. Unlike the
// controller's own events it is logged at debug level only: replicas may
// call every second, and refusals are logged by the self API itself.
func (m *Manager) Record(kind, app, replica, reason string, inputs map[string]float64) {
	m.log.Debug("serving: "+kind, "app", app, "replica", replica, "reason", reason)
	m.queueEvent(types.Event{Kind: kind, App: app, Replica: replica, Reason: reason, Inputs: inputs})
}

type selfAPI struct{ m *Manager }

var _ appapi.Platform = selfAPI{}

func (s selfAPI) Identify(hash string) (appapi.Caller, bool) {
	x := &s.m.self
	x.mu.Lock()
	ref, live := x.live[hash]
	if !live {
		ref, live = x.gone[hash]
		x.mu.Unlock()
		return appapi.Caller{App: ref.app, Replica: ref.id, Gone: true}, live
	}
	x.mu.Unlock()
	c := appapi.Caller{App: ref.app, Replica: ref.id}
	ctl := s.m.app(ref.app)
	if ctl == nil {
		c.Gone = true
		return c, true
	}
	ctl.mu.Lock()
	defer ctl.unlock()
	r := ctl.reps[ref.id]
	if r == nil {
		c.Gone = true
		return c, true
	}
	c.Node = r.rec.Node
	if host, _, err := net.SplitHostPort(r.rec.Addr); err == nil {
		c.IP = net.ParseIP(host)
	}
	return c, true
}

// caller locks the caller's app and returns it with the caller's replica;
// on success ctl.mu is held.
func (s selfAPI) caller(c appapi.Caller) (*appCtl, *replica, error) {
	ctl := s.m.app(c.App)
	if ctl == nil {
		return nil, nil, fmt.Errorf("app %q: %w", c.App, errdefs.ErrNotFound)
	}
	ctl.mu.Lock()
	if ctl.deleting {
		ctl.unlock()
		return nil, nil, fmt.Errorf("app %q is being deleted: %w", c.App, errdefs.ErrUnavailable)
	}
	r := ctl.reps[c.Replica]
	if r == nil {
		ctl.unlock()
		return nil, nil, fmt.Errorf("replica %q: %w", c.Replica, errdefs.ErrNotFound)
	}
	return ctl, r, nil
}

func selfReplica(r *replica) appapi.Replica {
	return appapi.Replica{ID: r.rec.ID, Revision: r.rec.Revision, State: string(r.rec.State), Addr: r.rec.Addr}
}

func (s selfAPI) Replicate(ctx context.Context, c appapi.Caller, wait bool) (appapi.Result, error) {
	ctl, _, err := s.caller(c)
	if err != nil {
		return appapi.Result{}, err
	}
	now := ctl.m.clock.Now()
	// A frozen replica is the fast way. Its thaw is made once ctl.mu is
	// released; one that fails is stopped, and the next is tried.
	var p plan
	for {
		if p, err = decideReplicate(ctl.view(), c.Replica, now); err != nil {
			ctl.unlock()
			return appapi.Result{}, err
		}
		if p.steps[0].kind != stepThaw {
			break
		}
		o := ctl.reps[p.steps[0].id]
		ctl.applySteps(now, p)
		ctl.unlock()
		ctl.mu.Lock()
		if o.state == StateReady {
			ctl.floor.raise(now, p.want)
			d := ctl.m.clock.Since(now)
			res := appapi.Result{Replica: selfReplica(o), How: "thawed", Seconds: max(d.Seconds(), 1e-6)}
			ctl.unlock()
			ctl.notify()
			return res, nil
		}
	}
	started := ctl.applySteps(now, p)
	if len(started) == 0 {
		ctl.unlock()
		return appapi.Result{}, fmt.Errorf("app %q: revision %d cannot be read; no replica started: %w", c.App, p.steps[0].rev, errdefs.ErrUnavailable)
	}
	id := started[0]
	nr := ctl.reps[id]
	ctl.floor.raise(now, p.want)
	settled, limit := nr.self.settled, ctl.rec.Config.Health.StartTimeout.Duration
	res := appapi.Result{Replica: selfReplica(nr), How: "started"}
	ctl.unlock()
	ctl.notify()
	if !wait {
		return res, nil
	}
	// The answer must be written before the self API's write timeout.
	t := ctl.m.clock.NewTimer(min(limit+time.Second, appapi.MaxReplicateWait))
	defer t.Stop()
	select {
	case <-settled:
	case <-t.C():
	case <-ctx.Done():
		return res, nil
	}
	ctl.mu.Lock()
	defer ctl.unlock()
	res.Replica = selfReplica(nr)
	switch {
	case nr.rec.State == StateReady && nr.rec.ReadyAt != nil:
		res.Seconds = nr.rec.ReadyAt.Sub(now).Seconds()
	case nr.state.exiting():
		return res, fmt.Errorf("replica %s did not start: %s: %w", id, nr.rec.Reason, errdefs.ErrUnavailable)
	}
	return res, nil
}

func (s selfAPI) Halt(ctx context.Context, c appapi.Caller) (appapi.Result, error) {
	ctl, r, err := s.caller(c)
	if err != nil {
		return appapi.Result{}, err
	}
	defer ctl.unlock()
	switch {
	case r.state == StateHalted:
		return appapi.Result{Replica: selfReplica(r), How: "halted"}, nil
	case r.state != StateReady:
		return appapi.Result{}, appapi.Refuse("state", "replica %s is %s%s; only a ready replica halts", c.Replica, r.rec.State, busyWord(r))
	}
	n := ctl.serving()
	if n-1 < ctl.rec.Min {
		return appapi.Result{}, appapi.Refuse("min", "app %s runs %d replica(s), its min is %d", c.App, n, ctl.rec.Min)
	}
	ctl.move(r, mvHalt, "", nil)
	ctl.publish()
	ctl.floor.lower(n - 1)
	ctl.notify()
	return appapi.Result{Replica: selfReplica(r), How: "halted"}, nil
}

func (s selfAPI) Die(ctx context.Context, c appapi.Caller) (appapi.Result, error) {
	ctl, r, err := s.caller(c)
	if err != nil {
		return appapi.Result{}, err
	}
	defer ctl.unlock()
	switch {
	case r.rec.State == StateDraining || r.rec.State == StateStopped:
		return appapi.Result{Replica: selfReplica(r), How: "draining"}, nil
	case r.state != StateReady && r.state != StateHalted:
		return appapi.Result{}, appapi.Refuse("state", "replica %s is %s%s; only a ready or halted replica dies", c.Replica, r.rec.State, busyWord(r))
	}
	if r.state == StateReady {
		n := ctl.serving()
		if n-1 < ctl.rec.Min {
			return appapi.Result{}, appapi.Refuse("min", "app %s runs %d replica(s), its min is %d", c.App, n, ctl.rec.Min)
		}
		ctl.floor.lower(n - 1)
	}
	ctl.drain(r, "asked to die by itself")
	ctl.notify()
	return appapi.Result{Replica: selfReplica(r), How: "draining"}, nil
}

func busyWord(r *replica) string {
	if r.state == StateFreezing {
		return " (being frozen)"
	}
	return ""
}

func (s selfAPI) Metric(ctx context.Context, c appapi.Caller, name string, value float64) error {
	ctl, r, err := s.caller(c)
	if err != nil {
		return err
	}
	defer ctl.unlock()
	if r.self.metrics == nil {
		r.self.metrics = map[string]metricSample{}
	}
	if _, ok := r.self.metrics[name]; !ok && len(r.self.metrics) >= maxMetrics {
		return errdefs.Invalid("name", "replica %s already publishes %d metrics, the most it may", c.Replica, maxMetrics)
	}
	r.self.metrics[name] = metricSample{value: value, at: ctl.m.clock.Now()}
	return nil
}

func (s selfAPI) Self(ctx context.Context, c appapi.Caller) (appapi.Self, error) {
	ctl, r, err := s.caller(c)
	if err != nil {
		return appapi.Self{}, err
	}
	defer ctl.unlock()
	out := appapi.Self{ID: r.rec.ID, App: ctl.name, Revision: r.rec.Revision, State: string(r.rec.State),
		Min: ctl.rec.Min, Max: ctl.rec.Max, Replicas: []appapi.Replica{}}
	for name, v := range r.self.metrics {
		if out.Metrics == nil {
			out.Metrics = map[string]float64{}
		}
		out.Metrics[name] = v.value
	}
	reps := make([]*replica, 0, len(ctl.reps))
	for _, o := range ctl.reps {
		reps = append(reps, o)
	}
	sort.Slice(reps, func(i, j int) bool { return reps[i].rec.StartedAt.Before(reps[j].rec.StartedAt) })
	for _, o := range reps {
		out.Replicas = append(out.Replicas, selfReplica(o))
	}
	return out, nil
}
