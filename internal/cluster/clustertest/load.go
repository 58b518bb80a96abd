package clustertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ProxyClient returns a client for the nodes' proxies that keeps its
// connections, each request bounded by LoopTimeout.
func ProxyClient() *http.Client {
	return &http.Client{Timeout: LoopTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 8, DisableCompression: true}}
}

// Get sends GET / for app through the proxy at addr (Host:
// <app>.localhost) and returns the replica that answered, as the example
// app hello names itself ("... from NAME ..."), and how long the answer
// took; an answer other than 200 is an error.
func Get(ctx context.Context, c *http.Client, addr, app string) (string, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
	if err != nil {
		return "", 0, err
	}
	req.Host = app + ".localhost"
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	took := time.Since(t0)
	if err != nil {
		return "", 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	_, rest, _ := strings.Cut(string(b), " from ")
	name, _, _ := strings.Cut(rest, " ")
	return name, took, nil
}

// Bounds of a load loop.
const (
	LoopClients  = 2
	LoopPause    = 2 * time.Millisecond
	LoopMaxTime  = 90 * time.Second
	LoopMaxTotal = 60000
	LoopTimeout  = 5 * time.Second // per request
)

// Loop is a bounded load loop: GET / for an app through one node's proxy
// from LoopClients clients, one request after another LoopPause apart,
// until stopped, for at most LoopMaxTime and LoopMaxTotal requests. It
// counts the failures (errors, answers other than 200, no answer within
// LoopTimeout) and keeps when each replica first answered.
type Loop struct {
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	mu            sync.Mutex
	total, failed int
	firstErr      string
	first         map[string]time.Time
}

// StartLoop starts a load loop on app through nd's proxy; End stops it.
func StartLoop(ctx context.Context, nd *Node, app string) *Loop {
	l := &Loop{stop: make(chan struct{}), first: map[string]time.Time{}}
	c := ProxyClient()
	deadline := time.Now().Add(LoopMaxTime)
	for range LoopClients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				select {
				case <-l.stop:
					return
				default:
				}
				l.mu.Lock()
				over := l.total >= LoopMaxTotal
				if !over {
					l.total++
				}
				l.mu.Unlock()
				if over {
					return
				}
				name, _, err := Get(ctx, c, nd.Proxy(), app)
				l.mu.Lock()
				if err != nil {
					l.failed++
					if l.firstErr == "" {
						l.firstErr = err.Error()
					}
				} else if _, seen := l.first[name]; !seen {
					l.first[name] = time.Now()
				}
				l.mu.Unlock()
				time.Sleep(LoopPause)
			}
		}()
	}
	return l
}

// End stops the loop and waits for its last requests.
func (l *Loop) End() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// WaitAnswer waits until a replica for which want holds has answered and
// returns when it first did, or fails after limit.
func (l *Loop) WaitAnswer(ctx context.Context, limit time.Duration, what string, want func(string) bool) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		l.mu.Lock()
		var at time.Time
		for r, t := range l.first {
			if want(r) && (at.IsZero() || t.Before(at)) {
				at = t
			}
		}
		firstErr := l.firstErr
		l.mu.Unlock()
		if !at.IsZero() {
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s: no answer within %s (first failure: %q)", what, limit, firstErr)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Counts returns how many requests were sent and failed, with the first
// failure.
func (l *Loop) Counts() (total, failed int, first string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.failed, l.firstErr
}
