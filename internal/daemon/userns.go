package daemon

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/shoal-run/shoal/internal/userns"
)

// openConfiner sets up the user namespaces of apps (see internal/userns):
// each app's replicas run as root in a namespace mapped onto host ids of
// the app's own. SHOAL_APP_USERNS=0 runs them as the host's root instead,
// SHOAL_USERNS_IDMAP=0 copies layers where they could be idmapped; either
// way, and when the host refuses user namespaces, `shoal info` and the log
// say so. The idmapped layers of this daemon are under
// /run/shoal-userns/<hash of the data dir>, the shifted copies under
// <data-dir>/userns.
func (d *Daemon) openConfiner() *userns.Confiner {
	if os.Getenv("SHOAL_APP_USERNS") == "0" {
		d.appsAsRoot("SHOAL_APP_USERNS=0")
		return nil
	}
	o := userns.Options{
		Store:    d.store,
		MountDir: userns.LayersDir(d.cfg.DataDir),
		CopyDir:  filepath.Join(d.cfg.DataDir, "userns"),
		Logger:   d.log,
	}
	if os.Getenv("SHOAL_USERNS_IDMAP") == "0" {
		o.NoIdmap = "SHOAL_USERNS_IDMAP=0"
	}
	c, err := userns.Open(o)
	if err != nil {
		d.appsAsRoot(err.Error())
		return nil
	}
	d.notes = append(d.notes, "apps: "+c.Note())
	return c
}

// appsAsRoot says, loudly, that apps run as the host's root.
func (d *Daemon) appsAsRoot(why string) {
	d.log.Warn("apps run as the host's root, without a user namespace", "why", why)
	d.notes = append(d.notes, fmt.Sprintf("apps: run as the HOST'S ROOT, without a user namespace (%s), with Docker's default capabilities", why))
}
