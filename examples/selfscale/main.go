// Command selfscale is shoal's example of an app that steers its own
// scaling through the self API ($SHOAL_API_URL, $SHOAL_TOKEN). It is a web
// server that counts the requests it answers per second. Above HIGH_RPS
// (default 200) it asks the platform for one more replica; below LOW_RPS
// (default 20) it halts (leaves the route, its in-flight requests finish)
// and then dies, unless it is the app's only serving replica. After any of
// these calls it waits COOLDOWN (default 5s) before it judges again, so
// that the new replica takes its share of the load first. It also
// publishes its rate as the metric "rps", and writes an access log line
// per request to $STATE_DIR/access.log (default /state).
//
// /healthz answers 200; every other path answers with the replica's id,
// after DELAY_MS milliseconds of work (default 0).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	port := env("PORT", "8080")
	high, low := envFloat("HIGH_RPS", 200), envFloat("LOW_RPS", 20)
	cooldown, err := time.ParseDuration(env("COOLDOWN", "5s"))
	if err != nil {
		log.Fatalf("selfscale: COOLDOWN: %v", err)
	}
	delay := time.Duration(envFloat("DELAY_MS", 0) * float64(time.Millisecond))
	id := env("SHOAL_REPLICA", "local")
	self := &selfAPI{url: os.Getenv("SHOAL_API_URL"), token: os.Getenv("SHOAL_TOKEN"),
		c: &http.Client{Timeout: 90 * time.Second}}
	alog, err := openLog(env("STATE_DIR", "/state"), id)
	if err != nil {
		log.Printf("selfscale: no access log: %v", err)
	}

	var served atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if delay > 0 {
			time.Sleep(delay)
		}
		w.Header().Set("X-Replica", id)
		fmt.Fprintf(w, "%s\n", id)
		alog.line(fmt.Sprintf("%s %s %s %s 200", time.Now().UTC().Format(time.RFC3339Nano), id, r.Method, r.URL.Path))
	})
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != http.ErrServerClosed {
			log.Fatalf("selfscale: %v", err)
		}
	}()
	log.Printf("selfscale %s: listening on :%s, replicate above %g req/s, leave below %g req/s, cool-down %s", id, port, high, low, cooldown)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if self.url != "" {
		go steer(ctx, self, &served, high, low, cooldown, id)
	} else {
		log.Printf("selfscale %s: no $SHOAL_API_URL; serving without steering", id)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	alog.close()
	log.Printf("selfscale %s: stopped after %d requests", id, served.Load())
}

// steer measures the request rate every second and calls the self API.
func steer(ctx context.Context, self *selfAPI, served *atomic.Int64, high, low float64, cooldown time.Duration, id string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastAt := served.Load(), time.Now()
	calm := time.Now().Add(cooldown) // no decision before this: a new replica first gets its share
	halted := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			n := served.Load()
			rps := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			self.post("/v1/self/metrics", map[string]any{"name": "rps", "value": rps})
			if halted || now.Before(calm) {
				continue
			}
			switch {
			case rps > high:
				st, body := self.post("/v1/self/replicate", nil)
				log.Printf("selfscale %s: %.0f req/s > %g: replicate: %d %s", id, rps, high, st, body)
				calm = time.Now().Add(cooldown)
			case rps < low && serving(self) > 1:
				st, body := self.post("/v1/self/halt", nil)
				log.Printf("selfscale %s: %.0f req/s < %g: halt: %d %s", id, rps, low, st, body)
				if st != http.StatusOK {
					calm = time.Now().Add(cooldown)
					continue
				}
				halted = true
				// In-flight requests finish on their own; die drains
				// what is left before the platform stops this replica.
				st, body = self.post("/v1/self/die", nil)
				log.Printf("selfscale %s: die: %d %s", id, st, body)
			}
		}
	}
}

// serving counts the app's replicas that take requests.
func serving(self *selfAPI) int {
	st, body := self.get("/v1/self")
	if st != http.StatusOK {
		return 0
	}
	var s struct {
		Replicas []struct{ State string } `json:"replicas"`
	}
	if json.Unmarshal(body, &s) != nil {
		return 0
	}
	n := 0
	for _, r := range s.Replicas {
		if r.State == "ready" || r.State == "starting" {
			n++
		}
	}
	return n
}

// selfAPI calls the platform from inside the replica.
type selfAPI struct {
	url, token string
	c          *http.Client
}

func (s *selfAPI) post(path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	return s.do(http.MethodPost, path, rd)
}

func (s *selfAPI) get(path string) (int, []byte) { return s.do(http.MethodGet, path, nil) }

func (s *selfAPI) do(method, path string, body io.Reader) (int, []byte) {
	req, err := http.NewRequest(method, s.url+path, body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, bytes.TrimSpace(b)
}

// accessLog appends one line per request to the replica's state dir,
// buffered and flushed every second and at exit.
type accessLog struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func openLog(dir, id string) (*accessLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "access.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	l := &accessLog{f: f, w: bufio.NewWriter(f)}
	go func() {
		for range time.Tick(time.Second) {
			l.mu.Lock()
			l.w.Flush()
			l.mu.Unlock()
		}
	}()
	return l, nil
}

func (l *accessLog) line(s string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.w.WriteString(s + "\n")
	l.mu.Unlock()
}

func (l *accessLog) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.w.Flush()
	l.f.Close()
	l.mu.Unlock()
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envFloat(k string, def float64) float64 {
	v, err := strconv.ParseFloat(env(k, ""), 64)
	if err != nil {
		return def
	}
	return v
}
