package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/bench"
	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/network"
	"github.com/shoal-run/shoal/internal/runtime"
)

// disk measures sequential write and direct read with dd, and random
// read/write with sysbench fileio: on the host's file system, in the
// container's overlay root and in a bind-mounted volume.
func (e *hostEnv) disk(ctx context.Context, rep *bench.Report) error {
	mib := 256
	sbSize, sbTime := "128M", "5"
	if e.o.Quick {
		mib, sbSize, sbTime = 32, "16M", "1"
	}
	vol := filepath.Join(e.dir, "volume")
	hostDir := filepath.Join(e.dir, "hostdisk")
	for _, d := range []string{vol, hostDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	mounts := []runtime.Mount{{Source: vol, Destination: "/vol"}}
	ddScript := func(dir string) string {
		return fmt.Sprintf("S=%s; mkdir -p %s && $S bench-worker time /usr/bin/dd if=/dev/zero of=%s/f bs=1M count=%d conv=fdatasync && "+
			"$S bench-worker time /usr/bin/dd if=%s/f of=/dev/null bs=1M iflag=direct && rm -f %s/f", "%s", dir, dir, mib, dir, dir)
	}
	sbArgs := "--file-total-size=" + sbSize + " --file-num=16"
	sbScript := func(dir string) string {
		return fmt.Sprintf("S=%%s; mkdir -p %s && cd %s && sysbench fileio %s prepare >/dev/null && "+
			"sysbench fileio %s --file-test-mode=rndrw --file-extra-flags=direct --time=%s run && sysbench fileio %s cleanup >/dev/null",
			dir, dir, sbArgs, sbArgs, sbTime, sbArgs)
	}
	type place struct {
		name string
		host bool
		dir  string
	}
	places := []place{{hostRowHost, true, hostDir}, {hostRowShoal + " (overlay root)", false, "/work"}, {hostRowShoal + " (bind volume)", false, "/vol/work"}}
	runScript := func(ctx context.Context, p place, script string) (string, error) {
		if p.host {
			return kit.HostRun(ctx, "/bin/sh", "-c", fmt.Sprintf(script, e.shoal))
		}
		return e.inContainer(ctx, mounts, "/bin/sh", "-c", fmt.Sprintf(script, "/shoal"))
	}
	var write, read, rnd []bench.Subject
	for _, p := range places {
		p := p
		lastRead := map[int]float64{}
		write = append(write, bench.Subject{Name: p.name, Command: e.show("sh -c '" + fmt.Sprintf(ddScript(p.dir), "shoal") + "'"),
			Run: func(ctx context.Context, i int) (float64, error) {
				out, err := runScript(ctx, p, ddScript(p.dir))
				if err != nil {
					return 0, err
				}
				lines := strings.Fields(out)
				if len(lines) != 2 {
					return 0, fmt.Errorf("dd output %q", bench.OneLine(out))
				}
				w, err1 := time.ParseDuration(lines[0])
				r, err2 := time.ParseDuration(lines[1])
				if err1 != nil || err2 != nil {
					return 0, fmt.Errorf("dd output %q", bench.OneLine(out))
				}
				lastRead[i] = float64(mib) * 1.048576 / r.Seconds()
				return float64(mib) * 1.048576 / w.Seconds(), nil
			}})
		read = append(read, bench.Subject{Name: p.name, Command: "the same run's dd iflag=direct read",
			Run: func(_ context.Context, i int) (float64, error) {
				for k, v := range lastRead {
					delete(lastRead, k)
					return v, nil
				}
				return 0, fmt.Errorf("no read from the write run")
			}})
		rnd = append(rnd, bench.Subject{Name: p.name, Command: e.show("sh -c '" + fmt.Sprintf(sbScript(p.dir), "shoal") + "'"),
			Run: func(ctx context.Context, _ int) (float64, error) {
				out, err := runScript(ctx, p, sbScript(p.dir))
				if err != nil {
					return 0, err
				}
				return sysbenchMiBs(out)
			}})
	}
	// Interleave write (which also reads) and the read figure of the same run.
	var both []bench.Subject
	for i := range write {
		both = append(both, write[i], read[i])
	}
	rows, err := bench.Measure(ctx, e.o, 1, e.o.RunsOr(5, 2), both)
	if err != nil {
		return err
	}
	var wRows, rRows []bench.Row
	for i := 0; i < len(rows); i += 2 {
		wRows, rRows = append(wRows, rows[i]), append(rRows, rows[i+1])
	}
	rep.Heading("Disk")
	wt := bench.Table{Title: "Sequential write, dd", Unit: "MB/s", HigherIsBetter: true, Baseline: hostRowHost, Rows: wRows,
		Note: fmt.Sprintf("GNU dd writes %d MiB of zeros in 1 MiB blocks and syncs (`conv=fdatasync`); then reads them back with O_DIRECT (next table). "+
			"The host's file is in the suite's scratch folder on the same file system that holds the container's overlay upper layer and the volume.", mib)}
	rt := bench.Table{Title: "Sequential read, dd iflag=direct", Unit: "MB/s", HigherIsBetter: true, Baseline: hostRowHost, Rows: rRows,
		Note: "The file just written, read in 1 MiB blocks bypassing the page cache."}
	rep.Table(wt)
	rep.Table(rt)
	rndRows, err := bench.Measure(ctx, e.o, 0, e.o.RunsOr(3, 1), rnd)
	if err != nil {
		return err
	}
	st := bench.Table{Title: "Random read/write, sysbench fileio", Unit: "MiB/s", HigherIsBetter: true, Baseline: hostRowHost, Rows: rndRows,
		Note: fmt.Sprintf("sysbench fileio, 16 files of %s in total, random reads and writes (`rndrw`, O_DIRECT) for %s s; the figure is read plus written MiB/s.", sbSize, sbTime)}
	rep.Table(st)
	rep.Plot("host-disk.svg", "disk throughput", bench.BarsOf("Disk, median MB/s (dd) and MiB/s (sysbench rndrw)",
		[]string{"dd write", "dd direct read", "sysbench rndrw"}, []string{places[0].name, places[1].name, places[2].name}, []bench.Table{wt, rt, st}))
	ov, vo := wt.Ratio(places[1].name, hostRowHost), wt.Ratio(places[2].name, hostRowHost)
	rep.Para("Writing through the container's overlay root runs at %s of the host's rate and through a bind volume at %s; "+
		"direct reads at %s and %s; random I/O at %s and %s. Overlay and volume sit on the same disk as the host's file, so these "+
		"ratios show what the layer in between costs. %s",
		bench.FormatRatio(ov), bench.FormatRatio(vo), bench.FormatRatio(rt.Ratio(places[1].name, hostRowHost)), bench.FormatRatio(rt.Ratio(places[2].name, hostRowHost)),
		bench.FormatRatio(st.Ratio(places[1].name, hostRowHost)), bench.FormatRatio(st.Ratio(places[2].name, hostRowHost)),
		overheadWords(1-math.Min(ov, vo), "sequential writes")+wt.Overlap(places[1].name, hostRowHost))
	return nil
}

var sysbenchRe = regexp.MustCompile(`(?m)^\s*(read|written), MiB/s:\s*([0-9.]+)`)

// sysbenchMiBs sums sysbench fileio's read and written MiB/s.
func sysbenchMiBs(out string) (float64, error) {
	m := sysbenchRe.FindAllStringSubmatch(out, -1)
	if len(m) != 2 {
		return 0, fmt.Errorf("sysbench output lacks read and written MiB/s: %q", bench.OneLine(out))
	}
	var sum float64
	for _, x := range m {
		v, _ := strconv.ParseFloat(x[2], 64)
		sum += v
	}
	return sum, nil
}

// network measures TCP request-response latency and throughput from the
// host to a server on loopback (bare process), in a container over its
// bridge and veth, and in a container over its own loopback.
func (e *hostEnv) network(ctx context.Context, rep *bench.Report) error {
	port, err := kit.FreePort()
	if err != nil {
		return err
	}
	hostAddr := fmt.Sprintf("127.0.0.1:%d", port)
	srv := exec.Command(e.shoal, "bench-worker", "serve", hostAddr)
	if err := srv.Start(); err != nil {
		return fmt.Errorf("host: serve: %w", err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	b, err := e.k.Create(ctx, runtime.Spec{Layers: e.layers, Args: []string{"/shoal", "bench-worker", "serve", "0.0.0.0:7070"}, ReadOnlyRootfs: true},
		network.Bridge, true)
	if err != nil {
		return fmt.Errorf("host: server container: %w", err)
	}
	defer b.Remove(context.WithoutCancel(ctx))
	type target struct {
		name, cmd string
		d         kit.Dialer
		addr      string
	}
	targets := []target{
		{"host loopback", "bare shoal bench-worker serve 127.0.0.1:PORT, client on the host", kit.Dialer{}, hostAddr},
		{"container, bridge + veth", "server in a shoal container (network bridge), client on the host to its IP", kit.Dialer{}, b.Att.IP.String() + ":7070"},
		{"container loopback", "server in a shoal container, client in the container's network namespace to 127.0.0.1", kit.Dialer{NSPath: b.Att.NSPath}, "127.0.0.1:7070"},
	}
	for _, t := range targets {
		if err := kit.WaitTCP(ctx, t.d, t.addr); err != nil {
			return fmt.Errorf("host: %s: %w", t.name, err)
		}
	}
	trips, bytes := 2000, int64(512<<20)
	if e.o.Quick {
		trips, bytes = 200, 32<<20
	}
	var lat, tput []bench.Subject
	for _, t := range targets {
		t := t
		lat = append(lat, bench.Subject{Name: t.name, Command: t.cmd, Run: func(ctx context.Context, _ int) (float64, error) {
			return pingPong(ctx, t.d, t.addr, trips)
		}})
		tput = append(tput, bench.Subject{Name: t.name, Command: t.cmd, Run: func(ctx context.Context, _ int) (float64, error) {
			return stream(ctx, t.d, t.addr, bytes)
		}})
	}
	runs := e.o.RunsOr(10, 3)
	latRows, err := bench.Measure(ctx, e.o, 1, runs, lat)
	if err != nil {
		return err
	}
	tputRows, err := bench.Measure(ctx, e.o, 1, runs, tput)
	if err != nil {
		return err
	}
	rep.Heading("Network")
	lt := bench.Table{Title: "TCP request-response latency", Unit: "µs per round trip", Baseline: "host loopback", Rows: latRows,
		Note: fmt.Sprintf("One connection, %d round trips of one byte each way (like netperf TCP_RR); the figure is the mean round trip of a run.", trips)}
	tt := bench.Table{Title: "TCP throughput", Unit: "MB/s", HigherIsBetter: true, Baseline: "host loopback", Rows: tputRows,
		Note: fmt.Sprintf("One connection sends %d MiB in 64 KiB writes; the server counts them and answers (like netperf TCP_STREAM).", bytes>>20)}
	rep.Table(lt)
	rep.Table(tt)
	rep.Para("Over the bridge and veth pair a round trip takes %s of loopback's time and a stream runs at %s of loopback's rate; "+
		"inside the container's own namespace loopback costs %s and %s. The bridge path is what a replica behind shoal's proxy pays; "+
		"%s",
		bench.FormatRatio(lt.Ratio(targets[1].name, targets[0].name)), bench.FormatRatio(tt.Ratio(targets[1].name, targets[0].name)),
		bench.FormatRatio(lt.Ratio(targets[2].name, targets[0].name)), bench.FormatRatio(tt.Ratio(targets[2].name, targets[0].name)),
		bridgeWords(lt.Ratio(targets[1].name, targets[0].name), tt.Ratio(targets[1].name, targets[0].name)))
	return nil
}

func bridgeWords(lat, tput float64) string {
	switch {
	case math.IsNaN(lat) || math.IsNaN(tput):
		return "one side has no numbers."
	case lat > 1.1 && tput < 0.9:
		return fmt.Sprintf("here shoal loses against the bare host: %.0f %% more latency and %.0f %% less throughput, the cost of the veth hop and bridge.",
			(lat-1)*100, (1-tput)*100)
	case lat > 1.1:
		return fmt.Sprintf("here shoal loses on latency, %.0f %% more per round trip: the veth hop and bridge. Throughput does not suffer (loopback's figure "+
			"is held back by client and server sharing two cores with the same softirq work).", (lat-1)*100)
	case tput < 0.9:
		return fmt.Sprintf("latency is within 10 %% of loopback, but throughput is %.0f %% lower.", (1-tput)*100)
	default:
		return "the veth hop and bridge cost less than 10 % here."
	}
}

// pingPong returns the mean round trip in µs over n one-byte exchanges.
func pingPong(ctx context.Context, d kit.Dialer, addr string, n int) (float64, error) {
	c, err := d.Dial(ctx, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if _, err := c.Write([]byte{'R'}); err != nil {
		return 0, err
	}
	b := []byte{'x'}
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if _, err := c.Write(b); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return 0, err
		}
	}
	return float64(time.Since(t0).Microseconds()) / float64(n), nil
}

// stream sends total bytes and returns MB/s once the server confirms them.
func stream(ctx context.Context, d kit.Dialer, addr string, total int64) (float64, error) {
	c, err := d.Dial(ctx, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	buf := make([]byte, 64<<10)
	t0 := time.Now()
	if _, err := c.Write([]byte{'S'}); err != nil {
		return 0, err
	}
	for sent := int64(0); sent < total; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
	}
	c.(interface{ CloseWrite() error }).CloseWrite()
	var got int64
	if err := binary.Read(c, binary.BigEndian, &got); err != nil {
		return 0, fmt.Errorf("server count: %w", err)
	}
	if got < total {
		return 0, fmt.Errorf("server got %d of %d bytes", got, total)
	}
	return float64(got) / time.Since(t0).Seconds() / 1e6, nil
}

// boot measures start to first HTTP 200 of the hello app: a bare process
// on the host versus a shoal container on the bridge.
func (e *hostEnv) boot(ctx context.Context, rep *bench.Report) error {
	hello := filepath.Join(e.dir, "rootfs", "hello")
	subjects := []bench.Subject{
		{Name: hostRowHost, Command: "PORT=P hello (bare process), GET 127.0.0.1:P/healthz until 200", Run: func(ctx context.Context, _ int) (float64, error) {
			port, err := kit.FreePort()
			if err != nil {
				return 0, err
			}
			cmd := exec.Command(hello)
			cmd.Env = []string{"PORT=" + strconv.Itoa(port)}
			t0 := time.Now()
			if err := cmd.Start(); err != nil {
				return 0, err
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() { cmd.Process.Kill(); <-done }()
			d, err := kit.WaitHTTP(ctx, kit.Dialer{}, fmt.Sprintf("127.0.0.1:%d", port), "/healthz", t0, 10*time.Second, kit.ExitedChan(done))
			return bench.Millis(d)[0], err
		}},
		{Name: hostRowShoal, Command: "runtime API: Acquire(bridge) + Run /hello, GET IP:8080/healthz until 200", Run: func(ctx context.Context, _ int) (float64, error) {
			t0 := time.Now()
			b, err := e.k.Create(ctx, runtime.Spec{Layers: e.layers, Args: []string{"/hello"}, Env: []string{"PORT=8080"}, ReadOnlyRootfs: true}, network.Bridge, true)
			if err != nil {
				return 0, err
			}
			defer b.Remove(context.WithoutCancel(ctx))
			d, err := kit.WaitHTTP(ctx, kit.Dialer{}, b.Att.IP.String()+":8080", "/healthz", t0, 10*time.Second, nil)
			return bench.Millis(d)[0], err
		}},
	}
	rows, err := bench.Measure(ctx, e.o, 1, e.o.RunsOr(20, 3), subjects)
	if err != nil {
		return err
	}
	rep.Heading("Boot to ready")
	tab := bench.Table{Unit: "ms", Baseline: hostRowHost, Rows: rows,
		Note: "The hello example app (a static Go HTTP server) from start until GET /healthz answers 200, polled every millisecond. " +
			"The container's figure includes a network namespace from the pool, the overlay mount, `runc run --detach` and the app's own start."}
	rep.Table(tab)
	rep.Para("A shoal container is ready %s ms after it is asked for, against %s ms for the bare process: %s the time. "+
		"That gap is container creation, which the lifecycle suite splits phase by phase.",
		bench.FormatValue(tab.Median(hostRowShoal)), bench.FormatValue(tab.Median(hostRowHost)), bench.FormatRatio(tab.Ratio(hostRowShoal, hostRowHost)))
	return nil
}

// kvmProbe says what /dev/kvm offers, without starting a guest.
func kvmProbe() string {
	const kvmGetAPIVersion, kvmCreateVM = 0xAE00, 0xAE01
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Sprintf("/dev/kvm cannot be opened (%v).", err)
	}
	defer unix.Close(fd)
	ver, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmGetAPIVersion, 0)
	if errno != 0 {
		return fmt.Sprintf("/dev/kvm exists but KVM_GET_API_VERSION fails (%v).", errno)
	}
	vm, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmCreateVM, 0)
	if errno != 0 {
		return fmt.Sprintf("/dev/kvm answers (API version %d) but KVM_CREATE_VM fails (%v).", ver, errno)
	}
	unix.Close(int(vm))
	qemu := "no qemu-system-x86_64 is installed"
	if _, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		qemu = "qemu-system-x86_64 is installed"
	}
	return fmt.Sprintf("/dev/kvm answers (API version %d) and KVM_CREATE_VM succeeds, but no guest is started: "+
		"%s.", ver, qemu)
}
