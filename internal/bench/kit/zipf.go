package kit

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"sort"
	"sync"
	"time"
)

// ZipfLoad is an open-loop load generator over many apps: requests leave
// at a fixed rate whatever the answers do, each to an app drawn from a
// Zipf distribution (the first app the most popular), with a seeded
// source so that a run can be repeated. It is bounded in count, time and
// requests in flight (a request that would pass InFlight is counted as
// failed, not sent), and only reaches the daemon's proxy on loopback.
type ZipfLoad struct {
	Apps     []string
	Rate     float64       // requests per second
	Duration time.Duration // how long requests leave
	Max      int           // at most this many requests (0: Rate × Duration)
	InFlight int           // at most this many in flight (0: 256)
	S        float64       // the Zipf exponent, > 1 (0: 1.1)
	Seed     int64
	Timeout  time.Duration // a request's limit (0: 60 s)
}

// ZipfResult is what a ZipfLoad run saw.
type ZipfResult struct {
	Sent, OK, Failed int
	Codes            map[int]int        // answers other than 200, by code (0: no answer)
	Latency          []float64          // ms, of the answered requests, sorted
	ByApp            map[string]int     // requests sent, by app
	First            map[string]float64 // ms, each app's first request's time
}

// Run sends the load through the proxy at proxy (host:port on loopback).
func (z ZipfLoad) Run(ctx context.Context, proxy string) (ZipfResult, error) {
	res := ZipfResult{Codes: map[int]int{}, ByApp: map[string]int{}, First: map[string]float64{}}
	if len(z.Apps) == 0 || z.Rate <= 0 || z.Duration <= 0 {
		return res, fmt.Errorf("zipf load: apps, rate and duration are required")
	}
	s, inflight, limit := z.S, z.InFlight, z.Timeout
	if s == 0 {
		s = 1.1
	}
	if s <= 1 {
		return res, fmt.Errorf("zipf load: s must be more than 1, got %g", s)
	}
	if inflight == 0 {
		inflight = 256
	}
	if limit == 0 {
		limit = time.Minute
	}
	total := int(z.Rate * z.Duration.Seconds())
	if z.Max > 0 && z.Max < total {
		total = z.Max
	}
	src := rand.New(rand.NewSource(z.Seed))
	zipf := rand.NewZipf(src, s, 1, uint64(len(z.Apps)-1))
	client := &http.Client{Timeout: limit, Transport: &http.Transport{MaxIdleConnsPerHost: inflight, DisableCompression: true}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, inflight)
	interval := time.Duration(float64(time.Second) / z.Rate)
	start := time.Now()
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return res, ctx.Err()
			case <-time.After(d):
			}
		}
		app := z.Apps[zipf.Uint64()]
		mu.Lock()
		res.Sent++
		res.ByApp[app]++
		first := res.ByApp[app] == 1
		mu.Unlock()
		select {
		case slots <- struct{}{}:
		default:
			mu.Lock()
			res.Failed++
			res.Codes[0]++
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			t0 := time.Now()
			code := GetCode(ctx, client, proxy, app)
			ms := float64(time.Since(t0)) / float64(time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			if first {
				res.First[app] = ms
			}
			if code == http.StatusOK {
				res.OK++
				res.Latency = append(res.Latency, ms)
				return
			}
			res.Failed++
			res.Codes[code]++
		}()
	}
	wg.Wait()
	sort.Float64s(res.Latency)
	return res, nil
}

// GetCode sends GET / for app (Host app.localhost) to the proxy at proxy,
// reads the whole answer and returns its status code, 0 when none came.
func GetCode(ctx context.Context, client *http.Client, proxy, app string) int {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+proxy+"/", nil)
	if err != nil {
		return 0
	}
	req.Host = app + ".localhost"
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
