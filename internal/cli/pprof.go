package cli

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves Go's profiles (net/http/pprof, under /debug/pprof/) on
// addr, a loopback address, for `shoal daemon --debug-pprof`; it returns
// the address it listens on and a function that stops it.
func servePprof(addr string, log *slog.Logger) (string, func(), error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, usageErrorf("--debug-pprof %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", nil, usageErrorf("--debug-pprof %q: use a loopback address (127.0.0.1:PORT): the profiles show the daemon's memory", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--debug-pprof %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			log.Warn("debug pprof server", "err", err)
		}
	}()
	log.Info("serving Go profiles", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	return ln.Addr().String(), func() { srv.Close() }, nil
}
