package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/proxy"
	"github.com/shoal-run/shoal/internal/route"
)

// Options say how the daemon runs its proxy process.
type Options struct {
	Addr string // where the proxy takes requests (--proxy)
	// TLSAddr is where it takes HTTPS requests (--proxy-tls; "": none).
	TLSAddr   string
	Domain    string
	RunDir    string // holds the control socket and the proxy's log
	DaemonAPI string // path of the daemon's API unix socket
	// Exe is the shoal binary to run as `proxy-serve` (default: this
	// process's own).
	Exe      string
	LogLevel string
	Version  string
	Logger   *slog.Logger
	// Limits bound what one client can hold of the proxy (zero fields:
	// the proxy's defaults).
	Limits proxy.Limits
	// TrustedProxies are the peers whose forwarded fields the proxy keeps
	// (proxy.ParseTrustList reads them; checked by the caller).
	TrustedProxies []string
	// OnDemand tells the proxy to ask the daemon for a certificate on a
	// handshake no certificate serves (certificates on demand are on).
	OnDemand bool
	// TCPPorts are the ports TCP routes may listen on (zero: the
	// default, route.DefaultTCPPorts).
	TCPPorts route.PortRange
}

// Files in the run dir.
const (
	ControlSocket = "proxy.sock"
	logFile       = "proxy.log"
)

// logMax is the size of the proxy's log over which it is rotated: by a
// new proxy process at its start, and by the running one (RotatingLog).
const logMax = 4 << 20

// stopGrace bounds the drain of a proxy whose daemon stops gracefully.
const stopGrace = 5 * time.Second

// Plane is the daemon's handle on its proxy process: it starts or adopts
// it, starts a new one should it die, and stops it when the daemon stops
// gracefully. A daemon that crashes leaves it running.
type Plane struct {
	o       Options
	log     *slog.Logger
	client  *Client
	ctlPath string

	mu      sync.Mutex
	info    Info
	exited  <-chan struct{} // closed when the current process is gone
	adopted bool

	quit chan struct{}
	done chan struct{}
}

// Open adopts the proxy process a previous daemon left running on the same
// run dir and address, or starts one. A proxy of another address or domain
// is drained and stopped first; a control socket nobody answers is stale
// and replaced. Bind errors name --proxy.
func Open(ctx context.Context, o Options) (*Plane, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		o.Exe = exe
	}
	o.Domain = strings.Trim(strings.ToLower(o.Domain), ".")
	pl := &Plane{o: o, log: o.Logger, ctlPath: filepath.Join(o.RunDir, ControlSocket),
		quit: make(chan struct{}), done: make(chan struct{})}
	pl.client = NewClient(pl.ctlPath, o.Logger)
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	info, err := pl.client.Info(ictx)
	cancel()
	switch {
	case err == nil && sameAddr(o.Addr, info.Addr) && sameTLSAddr(o.TLSAddr, info.TLSAddr) && info.Domain == o.Domain && info.Trusted == pl.trusted() && info.OnDemand == pl.o.OnDemand &&
		info.TCPPorts == pl.o.TCPPorts.String():
		if err := pl.adopt(info); err != nil {
			return nil, err
		}
	case err == nil:
		pl.log.Warn("proxy: the running proxy process serves another address, domain, trusted proxies or TCP ports; stopping it",
			"pid", info.Pid, "addr", info.Addr, "tls_addr", info.TLSAddr, "domain", info.Domain, "trusted_proxies", info.Trusted,
			"tcp_ports", info.TCPPorts)
		pl.stopOther(ctx, info)
		fallthrough
	default:
		if err := pl.start(pl.o.Addr, pl.o.TLSAddr); err != nil {
			return nil, err
		}
	}
	go pl.supervise()
	return pl, nil
}

// StopStale drains and stops a proxy process a crashed daemon left on run
// dir when this daemon runs none (--proxy off), and removes a stale control
// socket.
func StopStale(ctx context.Context, runDir string, log *slog.Logger) {
	pl := &Plane{log: log, ctlPath: filepath.Join(runDir, ControlSocket), quit: make(chan struct{})}
	pl.client = NewClient(pl.ctlPath, log)
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	info, err := pl.client.Info(ictx)
	cancel()
	if err == nil {
		log.Warn("proxy: stopping the proxy process a previous daemon left (this one runs none)", "pid", info.Pid, "addr", info.Addr)
		pl.stopOther(ctx, info)
	}
	os.Remove(pl.ctlPath)
}

// Client is the control socket's client; it is the daemon's router.
func (pl *Plane) Client() *Client { return pl.client }

// Addr is where the proxy takes requests.
func (pl *Plane) Addr() string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.info.Addr
}

// Info describes the proxy process in use.
func (pl *Plane) Info() (Info, bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.info, pl.adopted
}

// adopt takes over a running proxy process.
func (pl *Plane) adopt(info Info) error {
	exited, err := watchPid(info.Pid)
	if err != nil {
		return fmt.Errorf("proxy: adopt process %d: %w", info.Pid, err)
	}
	pl.mu.Lock()
	pl.info, pl.exited, pl.adopted = info, exited, true
	pl.mu.Unlock()
	pl.log.Info("proxy: adopted the running proxy process", "pid", info.Pid, "addr", info.Addr, "since", info.Started)
	return nil
}

// start binds the listener (and the TLS one, when tlsAddr is set) and
// the control socket and starts a proxy process that inherits them.
func (pl *Plane) start(addr, tlsAddr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--proxy %s: %w", pl.o.Addr, err)
	}
	defer l.Close()
	var tlsFile *os.File
	if tlsAddr != "" {
		tl, err := net.Listen("tcp", tlsAddr)
		if err != nil {
			return fmt.Errorf("--proxy-tls %s: %w", pl.o.TLSAddr, err)
		}
		defer tl.Close()
		if tlsFile, err = tl.(*net.TCPListener).File(); err != nil {
			return fmt.Errorf("--proxy-tls %s: %w", pl.o.TLSAddr, err)
		}
		defer tlsFile.Close()
	}
	os.Remove(pl.ctlPath)
	cl, err := net.Listen("unix", pl.ctlPath)
	if err != nil {
		return fmt.Errorf("proxy control socket %s: %w", pl.ctlPath, err)
	}
	ul := cl.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // the socket is the child's
	defer cl.Close()
	started := false
	defer func() {
		if !started {
			os.Remove(pl.ctlPath) // nobody will answer on it
		}
	}()
	if err := os.Chmod(pl.ctlPath, 0o600); err != nil {
		return fmt.Errorf("proxy control socket %s: %w", pl.ctlPath, err)
	}
	lf, err := l.(*net.TCPListener).File()
	if err != nil {
		return fmt.Errorf("--proxy %s: %w", pl.o.Addr, err)
	}
	defer lf.Close()
	cf, err := ul.File()
	if err != nil {
		return fmt.Errorf("proxy control socket %s: %w", pl.ctlPath, err)
	}
	defer cf.Close()
	logPath := filepath.Join(pl.o.RunDir, logFile)
	if fi, err := os.Stat(logPath); err == nil && fi.Size() > logMax {
		// The run dir is often a tmpfs: one older log is kept.
		os.Rename(logPath, logPath+".1")
	}
	out, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("proxy log %s: %w", logPath, err)
	}
	defer out.Close()
	args := []string{"proxy-serve", "--api", pl.o.DaemonAPI, "--log-file", logPath, "--tcp-ports", pl.o.TCPPorts.String()}
	if l := pl.o.Limits; l.MaxHeadBytes > 0 || l.MaxConnsPerClient > 0 {
		args = append(args, "--max-head-bytes", strconv.Itoa(l.MaxHeadBytes),
			"--max-conns-per-client", strconv.Itoa(l.MaxConnsPerClient))
	}
	if pl.o.Domain != "" {
		args = append(args, "--domain", pl.o.Domain)
	}
	if t := pl.trusted(); t != "" {
		args = append(args, "--trusted-proxies", t)
	}
	if pl.o.OnDemand {
		args = append(args, "--on-demand")
	}
	if pl.o.LogLevel != "" {
		args = append(args, "--log-level", pl.o.LogLevel)
	}
	cmd := exec.Command(pl.o.Exe, args...)
	cmd.ExtraFiles = []*os.File{lf, cf} // fds 3 and 4
	if tlsFile != nil {
		cmd.Args = append(cmd.Args, "--tls-listener")
		cmd.ExtraFiles = append(cmd.ExtraFiles, tlsFile) // fd 5
	}
	cmd.Stdout, cmd.Stderr = out, out
	// A session of its own: a signal to the daemon's process group (a
	// terminal's ^C) does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("proxy: start %s proxy-serve: %w", pl.o.Exe, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	// The control socket already takes connections; wait for the process
	// to answer on it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := pl.client.Info(ctx)
		cancel()
		if err == nil {
			started = true
			pl.mu.Lock()
			pl.info, pl.exited, pl.adopted = info, exited, false
			pl.mu.Unlock()
			pl.log.Info("proxy: process started", "pid", info.Pid, "addr", info.Addr, "log", logPath)
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("proxy: process exited at start (see %s): %v", logPath, cmd.ProcessState)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("proxy: process does not answer on %s (see %s): %w", pl.ctlPath, logPath, err)
		}
	}
}

// stopOther drains and stops a proxy process this daemon will not use.
func (pl *Plane) stopOther(ctx context.Context, info Info) {
	gone, err := watchPid(info.Pid)
	if err != nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, stopGrace+2*time.Second)
	defer cancel()
	pl.client.Shutdown(sctx, stopGrace)
	select {
	case <-gone:
	case <-sctx.Done():
		unix.Kill(info.Pid, unix.SIGKILL)
		<-gone
	}
}

// supervise starts a new proxy process when the current one dies (not when
// the daemon stops it), and pushes the route table again after a change
// failed to reach the proxy.
func (pl *Plane) supervise() {
	defer close(pl.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		pl.mu.Lock()
		exited := pl.exited
		pl.mu.Unlock()
		select {
		case <-pl.quit:
			return
		case <-exited:
			select {
			case <-pl.quit:
				return
			default:
			}
			pl.mu.Lock()
			last := pl.info
			pl.mu.Unlock()
			pl.log.Error("proxy: the proxy process exited; starting a new one", "pid", last.Pid)
			for {
				// The address it had (the port chosen for ":0" included),
				// so that clients find the new one where the old one was.
				err := pl.start(last.Addr, last.TLSAddr)
				if err == nil {
					break
				}
				pl.log.Error("proxy: restart failed", "err", err)
				select {
				case <-pl.quit:
					return
				case <-time.After(time.Second):
				}
			}
			if err := pl.client.Sync(); err != nil {
				pl.log.Error("proxy: push routes", "err", err)
			}
		case <-tick.C:
			if pl.client.broken.Load() {
				if err := pl.client.Sync(); err == nil {
					pl.log.Info("proxy: route table pushed again")
				}
			}
		}
	}
}

// Stop drains the proxy process (requests in flight finish, up to a few
// seconds) and waits for it to exit.
func (pl *Plane) Stop(ctx context.Context) error {
	select {
	case <-pl.quit:
		return nil
	default:
	}
	close(pl.quit)
	<-pl.done
	pl.client.Close() // no route change is sent again to a proxy stopping
	pl.mu.Lock()
	info, exited := pl.info, pl.exited
	pl.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, stopGrace+2*time.Second)
	defer cancel()
	err := pl.client.Shutdown(sctx, stopGrace)
	select {
	case <-exited:
	case <-sctx.Done():
		unix.Kill(info.Pid, unix.SIGKILL)
		<-exited
		err = errors.Join(err, fmt.Errorf("proxy: process %d did not stop; killed", info.Pid))
	}
	os.Remove(pl.ctlPath)
	return err
}

// watchPid returns a channel closed when process pid is gone. The process
// need not be this one's child: its pidfd turns readable when it exits.
func watchPid(pid int) (<-chan struct{}, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, err
	}
	gone := make(chan struct{})
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, -1)
			if n > 0 || (err != nil && err != unix.EINTR) {
				close(gone)
				return
			}
		}
	}()
	return gone, nil
}

// sameAddr reports whether a proxy listening on actual serves the address
// asked for: the same IP and port, any port when port 0 was asked for.
func sameAddr(want, actual string) bool {
	if want == actual {
		return true
	}
	wh, wp, err := net.SplitHostPort(want)
	if err != nil {
		return false
	}
	ah, ap, err := net.SplitHostPort(actual)
	if err != nil {
		return false
	}
	if wp != "0" && wp != ap {
		return false
	}
	if wh == ah {
		return true
	}
	wi, ai := net.ParseIP(wh), net.ParseIP(ah)
	if wh == "" || wh == "localhost" {
		wi = nil
	}
	switch {
	case wi != nil && ai != nil:
		return wi.Equal(ai)
	case wh == "" && ai != nil:
		return ai.IsUnspecified()
	case wh == "localhost" && ai != nil:
		return ai.IsLoopback()
	}
	return false
}

// sameTLSAddr is sameAddr for the TLS listener, which may be off on both
// sides.
func sameTLSAddr(want, actual string) bool {
	if want == "" || actual == "" {
		return want == actual
	}
	return sameAddr(want, actual)
}

// TLSAddr is where the proxy takes HTTPS requests; "" when it takes none.
func (pl *Plane) TLSAddr() string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.info.TLSAddr
}

// trusted is --trusted-proxies as the proxy process reports it back.
func (pl *Plane) trusted() string {
	l, _ := proxy.ParseTrustList(pl.o.TrustedProxies)
	return strings.Join(l.Strings(), ",")
}
