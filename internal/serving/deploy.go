package serving

import (
	"context"
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
	d, err := m.deploy(ctx, req)
	if err != nil {
		return types.App{}, err
	}
	app, err := m.Get(ctx, d.cfg.Name)
	app.Warnings = d.warnings
	return app, err
}

// deployment is what a deploy brings: the manifest, parsed, its text and
// file name, and the digest of its image.
type deployment struct {
	cfg    manifest.Config
	text   string
	file   string
	digest string
	now    time.Time
	// warnings are what the deploy's answer warns of (also events).
	warnings []string
}

// deploy writes the app's record (and its new revision's) and hands it to
// the app's controller: a new one for a new app (create), the app's own
// otherwise (redeploy). A new revision rolls out beside the one in
// service.
func (m *Manager) deploy(ctx context.Context, req types.DeployRequest) (deployment, error) {
	d, err := m.readDeploy(ctx, req)
	if err != nil {
		return deployment{}, err
	}
	l, err := m.leading()
	if err != nil {
		return deployment{}, err
	}
	ctl := m.app(d.cfg.Name)
	if ctl == nil {
		ctl, err = m.create(ctx, l, d)
	} else {
		err = ctl.redeploy(ctx, d)
	}
	if err != nil {
		return deployment{}, err
	}
	ctl.notify()
	return d, nil
}

// readDeploy parses the manifest of req and finds its image.
func (m *Manager) readDeploy(ctx context.Context, req types.DeployRequest) (deployment, error) {
	d := deployment{text: req.Manifest, file: req.File}
	if d.file == "" {
		d.file = "shoal.toml"
	}
	cfg, err := manifest.Parse([]byte(req.Manifest), d.file)
	if err != nil {
		return d, err
	}
	if err := m.checkListen(cfg); err != nil {
		return d, err
	}
	img, err := m.o.Images.Get(ctx, cfg.Image)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return d, errdefs.Invalid("image", "%s: image %q is not in the image store; build, import or pull it first", d.file, cfg.Image)
		}
		return d, fmt.Errorf("%s: image %q: %w", d.file, cfg.Image, err)
	}
	if w := cfg.EntrypointWarning(img.Config.Entrypoint); w != "" {
		d.warnings = append(d.warnings, d.file+": "+w)
		m.emit("warning", cfg.Name, "", d.file+": "+w, nil)
	}
	d.cfg, d.digest, d.now = cfg, img.Digest, m.clock.Now()
	return d, nil
}

// create makes app d's first records and its controller, and runs it.
func (m *Manager) create(ctx context.Context, l *lead, d deployment) (*appCtl, error) {
	name := d.cfg.Name
	rec, rv, _ := nextRecord(appRecord{Created: d.now}, d.cfg, d.text, d.digest, d.now)
	if err := writeDeploy(ctx, l, rec, rv, true); err != nil {
		return nil, err
	}
	ctl := newAppCtl(m, rec, l)
	ctl.revs[rec.Revision] = rv
	m.mu.Lock()
	if other := m.apps[name]; other != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("app %q: deployed twice at once: %w", name, errdefs.ErrConflict)
	}
	if m.lead != l {
		m.mu.Unlock()
		return nil, m.errNotLeader()
	}
	m.addApp(ctl)
	m.mu.Unlock()
	if err := os.MkdirAll(ctl.logs.dir, 0o700); err != nil {
		return nil, fmt.Errorf("app %q: %w", name, err)
	}
	m.run(ctl)
	m.emit("deploy", name, "", fmt.Sprintf("created at revision %d (%s)", rec.Revision, d.cfg.Image), nil)
	ctl.mu.Lock()
	ctl.publish()
	ctl.unlock()
	return ctl, nil
}

// redeploy gives the app deployment d: its records are written from the
// app record as it is, without ctl.mu, and taken by the controller
// unless a reconcile round changed the record meanwhile (a rollout moved
// on); then the deploy applies to that one.
func (ctl *appCtl) redeploy(ctx context.Context, d deployment) error {
	// ctl.recMu keeps the writer from writing an older record after this
	// one.
	ctl.recMu.Lock()
	defer ctl.recMu.Unlock()
	for {
		ctl.mu.Lock()
		deleting, rec, base := ctl.deleting, ctl.rec, ctl.gen
		ctl.unlock()
		if deleting {
			return fmt.Errorf("app %q is being deleted: %w", ctl.name, errdefs.ErrConflict)
		}
		wasSticky := rec.Sticky
		rec, rv, newRev := nextRecord(rec, d.cfg, d.text, d.digest, d.now)
		if err := writeDeploy(ctx, ctl.lead, rec, rv, newRev); err != nil {
			return err
		}
		if ctl.takeDeploy(rec, rv, newRev, base) {
			ctl.deployed(d, rec, newRev, wasSticky)
			return nil
		}
	}
}

// writeDeploy writes a deploy's app record rec, and its revision rv when
// that is new.
func writeDeploy(ctx context.Context, l *lead, rec appRecord, rv revisionRecord, newRev bool) error {
	if newRev {
		if err := putJSON(ctx, l, store.RevisionKey(rec.Config.Name, rec.Revision), rv); err != nil {
			return err
		}
	}
	return putJSON(ctx, l, store.AppKey(rec.Config.Name), rec)
}

// takeDeploy makes rec, with its revision rv, the app's record, unless
// the record changed since generation base; it reports whether it did.
func (ctl *appCtl) takeDeploy(rec appRecord, rv revisionRecord, newRev bool, base uint64) bool {
	ctl.mu.Lock()
	defer ctl.unlock()
	if ctl.gen != base {
		return false
	}
	ctl.rec = rec
	ctl.recChanged()
	ctl.revs[rec.Revision] = rv
	if newRev {
		ctl.roFailures = 0
	}
	if err := ctl.scaler.d.SetPolicy(policy(rec)); err != nil {
		ctl.m.log.Warn("serving: autoscale policy", "app", ctl.name, "err", err)
	}
	ctl.publish()
	return true
}

// deployed emits the events of a deploy the app took.
func (ctl *appCtl) deployed(d deployment, rec appRecord, newRev, wasSticky bool) {
	m, name := ctl.m, ctl.name
	if newRev {
		m.emit("deploy", name, "", fmt.Sprintf("revision %d (%s)", rec.Revision, d.cfg.Image), nil)
		m.emit("rollout", name, "", fmt.Sprintf("revision %d: rolling out, traffic stays on %s until it is ready",
			rec.Revision, trafficString(rec.Traffic)), nil)
	}
	if rec.Sticky != wasSticky {
		m.emit("traffic", name, "", fmt.Sprintf("sticky %v by %s ([traffic] sticky)", rec.Sticky, d.file), nil)
	}
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
