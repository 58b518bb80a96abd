package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/api/types"
)

// inReplica is a caller of the self API as replica id is one: the token
// and URL from the replica's own environment, the connection made from
// inside its network namespace.
type inReplica struct {
	id, url, token string
	pid            int
}

// asReplica reads replica id's self API environment from /proc.
func asReplica(t *testing.T, a types.App, id string) *inReplica {
	t.Helper()
	for _, r := range a.Replicas {
		if r.ID != id {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", r.Pid))
		if err != nil {
			t.Fatalf("replica %s: %v", id, err)
		}
		x := &inReplica{id: id, pid: r.Pid}
		for _, kv := range strings.Split(string(b), "\x00") {
			if v, ok := strings.CutPrefix(kv, "SHOAL_API_URL="); ok {
				x.url = v
			}
			if v, ok := strings.CutPrefix(kv, "SHOAL_TOKEN="); ok {
				x.token = v
			}
		}
		if x.url == "" || len(x.token) < 43 {
			t.Fatalf("replica %s has no SHOAL_API_URL or SHOAL_TOKEN of 32 bytes: %q %q", id, x.url, x.token)
		}
		return x
	}
	t.Fatalf("no replica %s in %+v", id, a.Replicas)
	return nil
}

// dialFrom connects to addr from inside the network namespace of process
// pid (0: the test's own). The socket is made on a thread that joined the
// namespace; the thread ends with its goroutine.
func dialFrom(pid int, addr string) (net.Conn, error) {
	if pid == 0 {
		return net.DialTimeout("tcp", addr, 5*time.Second)
	}
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread leaves with the goroutine
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		ch <- res{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// selfAnswer is the self API's answer to one call.
type selfAnswer struct {
	code int
	body map[string]any
	raw  string
}

func (a selfAnswer) str(keys ...string) string {
	var v any = a.body
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	s, _ := v.(string)
	return s
}

// call makes a self API call with token from the namespace of process
// from (0: the host).
func selfCall(t *testing.T, url, token string, from int, method, path, body string) selfAnswer {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return dialFrom(from, host) }}}
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequest(method, url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := selfAnswer{code: resp.StatusCode, raw: string(b)}
	if err := json.Unmarshal(b, &a.body); err != nil {
		t.Fatalf("%s %s: %d with a body that is not JSON: %q", method, path, resp.StatusCode, b)
	}
	return a
}

// call makes a self API call as the replica itself.
func (x *inReplica) call(t *testing.T, method, path, body string) selfAnswer {
	t.Helper()
	return selfCall(t, x.url, x.token, x.pid, method, path, body)
}

// expect fails the test unless the answer has the status code and, for an
// error, the reason.
func (a selfAnswer) expect(t *testing.T, what string, code int, reason string) {
	t.Helper()
	if a.code != code || (reason != "" && a.str("reason") != reason) {
		t.Fatalf("%s: %d %s, want %d %s", what, a.code, a.raw, code, reason)
	}
}

// events returns the app's events of kind.
func (d *daemon) events(app, kind string) []types.Event {
	d.t.Helper()
	evs := parseEvents(d.t, d.must("events", "--app", app, "--output", "json"))
	var out []types.Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// selfPair deploys selfManifest with max maxReplicas, waits for its one
// replica and has it replicate itself; it returns the first replica and
// the one it started, once both are ready.
func (d *daemon) selfPair(t *testing.T, maxReplicas int) (first, second *inReplica) {
	t.Helper()
	d.exampleImage("hello")
	d.deploy(strings.Replace(selfManifest, "%s", strconv.Itoa(maxReplicas), 1))
	a := d.waitApp("web", "one ready replica", func(a types.App) bool { return a.Ready == 1 })
	first = asReplica(t, a, readyIDs(a)[0])
	ans := first.call(t, "POST", "/v1/self/replicate", "")
	ans.expect(t, "replicate", 200, "")
	a = d.waitApp("web", "two ready replicas", func(a types.App) bool { return a.Ready == 2 })
	return first, asReplica(t, a, ans.str("replica", "id"))
}
