package kit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRunABUntilStops: ab with a time limit and a count it cannot reach
// ends when stop is closed, and the run keeps the requests it completed
// with their start stamps; closing nothing leaves ab to its limits.
func TestRunABUntilStops(t *testing.T) {
	if _, err := exec.LookPath("ab"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	first := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Host, "app.localhost") {
			http.Error(w, "wrong host "+r.Host, http.StatusBadRequest)
			return
		}
		once.Do(func() { close(first) })
		time.Sleep(5 * time.Millisecond)
		w.Write([]byte("ok\n"))
	}))
	t.Cleanup(srv.Close)
	proxy := strings.TrimPrefix(srv.URL, "http://")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	go func() {
		select {
		case <-first:
			time.Sleep(1500 * time.Millisecond)
			close(stop)
		case <-ctx.Done():
		}
	}()
	run, err := RunABUntil(ctx, stop, t.TempDir(), proxy, "app", "/", "-q", "-t", "240", "-n", "50000000", "-c", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !run.Stopped || run.Complete == 0 || len(run.Starts) == 0 || run.Failed != 0 || run.Took >= 240 {
		t.Fatalf("stopped run = Stopped %v, %d complete, %d starts, %d failed, took %g s", run.Stopped, run.Complete, len(run.Starts), run.Failed, run.Took)
	}
	run, err = RunABUntil(ctx, nil, t.TempDir(), proxy, "app", "/", "-q", "-n", "20", "-c", "2")
	if err != nil {
		t.Fatal(err)
	}
	if run.Stopped || run.Complete != 20 || len(run.Starts) != 20 {
		t.Fatalf("counted run = Stopped %v, %d complete, %d starts", run.Stopped, run.Complete, len(run.Starts))
	}
}
