package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/images"
	"github.com/shoal-run/shoal/internal/runtime"
)

// serve serves the API on the unix socket, on TCP behind the bearer token
// when configured, and the UI when asked for.
func (d *Daemon) serve(ctx context.Context) error {
	srv := &api.Server{
		Images:     images.New(d.images, d.holdImage),
		Containers: d.ctrs,
		Jobs:       jobsAPI{d.jobs.Queue},
		Nodes:      nodeService{d},
		Apps:       d.appsAPI(),
		Events:     wireEvents{d.events},
		Health:     d.health,
		Registry:   d.gatherers,
		Logger:     d.log,
	}
	if d.apps != nil {
		// Per-app series only for apps in service or recently asked.
		srv.Registry = d.apps.Gatherer(d.gatherers)
	}
	if srv.Apps != nil {
		srv.Apps = appsWithDomains{appsWithSecrets{srv.Apps, d.secrets}, d.store, d.cfg.Domain}
	}
	srv.Secrets = secretsAPI{d.secrets}
	srv.Certs = certsAPI{d.certs}
	if d.acme != nil {
		srv.Certs = certsWithACME{certsAPI{d.certs}, d.acme}
	}
	srv.Volumes = d.volumesAPI()
	d.forwardApps(srv)
	ul, err := listenUnix(d.cfg.API)
	if err != nil {
		return err
	}
	d.start(ul, srv.Handler(""))
	d.log.Info("API listening", "addr", d.cfg.API)
	if tl := d.tcpL; tl != nil { // bound by bindTCP
		tok, err := loadToken(d.cfg.TokenFile, filepath.Join(d.cfg.DataDir, "api-token"))
		if err != nil {
			return err
		}
		d.token = tok
		d.start(tl, d.tcpHandler(srv.Handler(tok)))
		d.log.Info("TCP API listening (bearer token required)", "addr", tl.Addr().String())
	}
	if d.cfg.UI != "" {
		return d.serveUI(ctx)
	}
	return nil
}

func (d *Daemon) start(l net.Listener, h http.Handler) {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	d.servers = append(d.servers, s)
	go func() {
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("API server stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
}

func (d *Daemon) health(ctx context.Context) types.Health {
	h := types.Health{Status: "ok", Version: d.cfg.Version, Runtime: d.rt.Name(), CgroupMode: runtime.CgroupMode(),
		Store: d.cfg.Store, DataDir: d.cfg.DataDir, Proxy: d.proxyAddr, Notes: d.notes}
	if d.plane != nil {
		in, adopted := d.plane.Info()
		how := "started by this daemon"
		if adopted {
			how = "adopted from a previous daemon"
		}
		h.Notes = append(slices.Clone(d.notes), fmt.Sprintf("proxy: process %d on %s since %s (%s)",
			in.Pid, in.Addr, in.Started.UTC().Format(time.RFC3339), how))
		h.ProxyTLS = in.TLSAddr
	}
	if note := d.clusterNote(); note != "" {
		h.Notes = append(slices.Clone(h.Notes), note)
	}
	if d.net != nil {
		h.Notes = append(slices.Clone(h.Notes), d.net.Ceiling())
	}
	if cs, err := d.ctrs.List(ctx); err == nil {
		h.Containers = len(cs)
	}
	if imgs, err := d.images.List(ctx); err == nil {
		h.Images = len(imgs)
	}
	return h
}

// listenUnix listens on a unix:// address with mode 0600, replacing a stale
// socket file but refusing to steal one a live daemon is serving.
func listenUnix(addr string) (net.Listener, error) {
	u, err := url.Parse(addr)
	if err != nil || u.Scheme != "unix" || u.Path == "" {
		return nil, fmt.Errorf("--api %q: use unix:///path/to.sock", addr)
	}
	path := u.Path
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("--api %s: %w", addr, err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("--api %s: another shoal daemon is already serving this socket", addr)
	}
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--api %s: %w", addr, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("--api %s: %w", addr, err)
	}
	return l, nil
}

// loadToken reads the TCP API token from file (or $SHOAL_TOKEN), making a
// new random one in def when neither exists.
func loadToken(file, def string) (string, error) {
	if t := os.Getenv("SHOAL_TOKEN"); t != "" && file == "" {
		return t, nil
	}
	if file == "" {
		file = def
	}
	b, err := os.ReadFile(file)
	if err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("token file %s is empty", file)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("token file %s: %w", file, err)
	}
	t := newID(32)
	if err := os.WriteFile(file, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("token file %s: %w", file, err)
	}
	return t, nil
}

// newID returns n random hex digits.
func newID(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
