package clustertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/loadloop"
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
	return loadloop.HelloReplica(string(b)), took, nil
}

// Bounds of a load loop.
const (
	LoopClients  = 2
	LoopPause    = 2 * time.Millisecond
	LoopMaxTime  = 90 * time.Second
	LoopMaxTotal = 60000
	LoopTimeout  = 5 * time.Second // per request
)

// StartLoop starts a bounded load loop: GET / for app through nd's proxy
// from LoopClients clients, one request after another LoopPause apart,
// until End, for at most LoopMaxTime and LoopMaxTotal requests. It counts
// the failures (errors, answers other than 200, no answer within
// LoopTimeout) and keeps when each replica first answered.
func StartLoop(ctx context.Context, nd *Node, app string) (*loadloop.Loop, error) {
	c := ProxyClient()
	l, err := loadloop.Start(ctx, loadloop.Options{Clients: LoopClients, Pause: LoopPause, MaxTime: LoopMaxTime,
		MaxTotal: LoopMaxTotal, Timeout: LoopTimeout}, func(ctx context.Context) (string, error) {
		name, _, err := Get(ctx, c, nd.Proxy(), app)
		return name, err
	})
	if err != nil {
		return nil, fmt.Errorf("app %q through %s: %w", app, nd.Name, err)
	}
	return l, nil
}
