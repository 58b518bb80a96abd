package kit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/bench"
)

// ABRun is one ab run: per-request timings from `ab -g` and its counts.
type ABRun struct {
	// Begin is the whole second in which the first request started: ab
	// -g stamps each request's start in whole seconds since the epoch.
	Begin    time.Time
	Starts   []float64 // s since Begin, per request, in order
	TTimes   []float64 // ms, per request
	Failed   int       // failed requests (but ab's "Length" ones) and non-2xx answers
	Complete int       // ab's "Complete requests"
	Took     float64   // ab's "Time taken for tests", s
	Command  string    // the command as run, the -g file shown as FILE
	Stopped  bool      // ended by the caller's stop (RunABUntil), not by its count or time limit
}

// PerSecond returns, for each whole second of the run, the mean and p99
// total time of the requests that started in it.
func (r ABRun) PerSecond(secs int) (xs, mean, p99 []float64) {
	by := make([][]float64, secs)
	for i, s := range r.Starts {
		if k := int(s); k >= 0 && k < secs {
			by[k] = append(by[k], r.TTimes[i])
		}
	}
	for k := 0; k < secs; k++ {
		xs = append(xs, float64(k))
		st := bench.Stats(by[k])
		mean, p99 = append(mean, st.Mean), append(p99, st.P99)
	}
	return xs, mean, p99
}

// Window returns the total times of requests that started in [from, to) s.
func (r ABRun) Window(from, to float64) []float64 {
	var out []float64
	for i, s := range r.Starts {
		if s >= from && s < to {
			out = append(out, r.TTimes[i])
		}
	}
	return out
}

// RunAB runs ab with args (its options but -g) for GET path of app
// through the daemon's proxy at proxy (Host: app.localhost), keeping ab's
// per-request records in dir.
func RunAB(ctx context.Context, dir, proxy, app, path string, args ...string) (ABRun, error) {
	return RunABUntil(ctx, nil, dir, proxy, app, path, args...)
}

// RunABUntil is RunAB that also ends ab when stop is closed: ab, sent an
// interrupt, reports the requests it completed and writes their records as
// at its time limit, and the run is Stopped. A nil stop never closes.
func RunABUntil(ctx context.Context, stop <-chan struct{}, dir, proxy, app, path string, args ...string) (ABRun, error) {
	gnu := filepath.Join(dir, app+".ab.tsv")
	args = append(append([]string{}, args...), "-g", gnu, "-H", "Host: "+app+".localhost", "http://"+proxy+path)
	run := ABRun{Begin: time.Now(), Command: "ab " + strings.Join(QuoteArgs(args), " ")}
	run.Command = strings.ReplaceAll(run.Command, gnu, "FILE")
	cmd := exec.CommandContext(ctx, "ab", args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return run, fmt.Errorf("ab: %w", err)
	}
	exited := make(chan struct{})
	interrupted := make(chan bool, 1)
	go func() {
		select {
		case <-stop:
			interrupted <- cmd.Process.Signal(os.Interrupt) == nil
		case <-exited:
			interrupted <- false
		}
	}()
	err := cmd.Wait()
	close(exited)
	run.Stopped = <-interrupted
	out := buf.Bytes()
	// ab exits with 1 after printing its results for an interrupt.
	var ee *exec.ExitError
	if err != nil && !(run.Stopped && errors.As(err, &ee) && ee.ExitCode() == 1 && ctx.Err() == nil) {
		return run, fmt.Errorf("ab: %w: %s", err, bench.OneLine(string(out)))
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && strings.HasPrefix(f[0], "(Connect:"):
			// The breakdown of "Failed requests": answers that differ
			// in length (a timing, the replica's name, phpinfo()'s
			// request time) are what ab counts as failures of "Length";
			// those are not failed requests.
			for i := 0; i+1 < len(f); i += 2 {
				if k := strings.Trim(f[i], "(:"); k != "Length" {
					n, _ := strconv.Atoi(strings.Trim(f[i+1], ",)"))
					run.Failed += n
				}
			}
		case len(f) >= 3 && f[0] == "Non-2xx" && f[1] == "responses:":
			n, _ := strconv.Atoi(f[2])
			run.Failed += n
		case len(f) >= 3 && f[0] == "Complete" && f[1] == "requests:":
			run.Complete, _ = strconv.Atoi(f[2])
		case len(f) >= 5 && f[0] == "Time" && f[1] == "taken":
			run.Took, _ = strconv.ParseFloat(f[4], 64)
		}
	}
	f, err := os.Open(gnu)
	if err != nil {
		return run, fmt.Errorf("ab -g: %w", err)
	}
	defer f.Close()
	type rec struct{ start, ttime float64 }
	var recs []rec
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) < 6 || cols[0] == "starttime" {
			continue
		}
		// starttime, seconds, ctime, dtime, ttime, wait; seconds is the
		// start in whole seconds since the epoch.
		us, err1 := strconv.ParseFloat(cols[1], 64)
		tt, err2 := strconv.ParseFloat(cols[4], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		recs = append(recs, rec{us, tt})
	}
	if len(recs) == 0 {
		return run, fmt.Errorf("ab -g: no requests recorded: %s", bench.OneLine(string(out)))
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].start < recs[j].start })
	first := recs[0].start
	run.Begin = time.Unix(int64(first), 0)
	for _, r := range recs {
		run.Starts = append(run.Starts, r.start-first)
		run.TTimes = append(run.TTimes, r.ttime)
	}
	return run, nil
}

// QuoteArgs quotes the arguments that hold spaces, for display.
func QuoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " ;") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}
