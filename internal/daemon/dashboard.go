package daemon

import (
	"context"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/clock"
	"github.com/shoal-run/shoal/internal/dashboard"
	"github.com/shoal-run/shoal/internal/jobs"
)

// serveUI serves the dashboard on --ui behind the TCP API's token, and
// samples the daemon's state for it until ctx ends.
func (d *Daemon) serveUI(ctx context.Context) error {
	if d.token == "" {
		tok, err := loadToken(d.cfg.TokenFile, filepath.Join(d.cfg.DataDir, "api-token"))
		if err != nil {
			return err
		}
		d.token = tok
	}
	o := dashboard.Options{Token: d.token, Clock: clock.Real{}, Logger: d.log}
	if d.apps != nil {
		o.Apps = d.apps
	}
	if d.events != nil {
		o.Events = wireEvents{d.events}
	}
	if d.route != nil {
		o.Loads = d.route
	}
	if d.cluster != nil {
		o.Nodes = nodeService{d}
	}
	if d.certs != nil {
		o.Certs = certsAPI{d.certs}
	}
	if d.jobs != nil && d.jobs.Queue != nil {
		o.Jobs = dashJobs{d.jobs.Queue}
	}
	l := d.uiL // bound by bindTCP
	ui := dashboard.New(o)
	go ui.Run(ctx)
	d.start(l, ui.Handler())
	url := "http://" + l.Addr().String() + "/"
	d.log.Info("dashboard listening (API token required)", "url", url)
	d.notes = append(d.notes, "dashboard at "+url+" (open it once with ?token=<the API token>)")
	return nil
}

// dashJobs reads the job queue.
type dashJobs struct{ m jobs.Queue }

func (j dashJobs) Stats() dashboard.JobStats {
	q, r, s := j.m.Stats()
	return dashboard.JobStats{Queued: q, Running: r, Slots: s}
}

func (j dashJobs) Tenants() []dashboard.Tenant {
	ts := j.m.Tenants()
	out := make([]dashboard.Tenant, len(ts))
	for i, t := range ts {
		out[i] = dashboard.Tenant{Name: t.Tenant, Queued: t.Queued, Running: t.Running}
	}
	return out
}
