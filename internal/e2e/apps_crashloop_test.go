package e2e

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCrashLoopAnswersAtOnce: an app whose process exits at once backs off
// its starts; once its next start is seconds away, a request is answered
// 503 at once with the reason and Retry-After set to the seconds until
// that start, rather than held for a start (the queue timeout, 30 s).
func TestCrashLoopAnswersAtOnce(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	if r, _ := d.deployFile(`name = "crashy"
image = "busybox:1"
command = ["sh", "-c", "echo giving up; exit 7"]
[scale]
min = 1
`, "--detach"); r.code != 0 {
		t.Fatalf("deploy: %s%s", r.stdout, r.stderr)
	}
	proxy := d.proxyAddr()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, err := http.NewRequest(http.MethodGet, "http://"+proxy+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "crashy.localhost"
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET through the proxy: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 503 || ra < 1 {
			t.Fatalf("request to a crash-looping app: %d, Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
		// A back-off of 2 s or more is announced as it is.
		if ra >= 2 {
			if !strings.Contains(string(b), "exited with code 7") || !strings.Contains(string(b), "next start is in") {
				t.Fatalf("503 of a crash-looping app: %s, want the reason and the next start", b)
			}
			t.Logf("503 with Retry-After %d: %s", ra, strings.TrimSpace(string(b)))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 503 announced the back-off in 2 minutes; the last: %d, Retry-After %d: %s", resp.StatusCode, ra, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
