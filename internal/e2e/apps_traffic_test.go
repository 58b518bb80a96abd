package e2e

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// revisionOf maps each replica the app lists to its revision.
func revisionOf(a types.App) map[string]int {
	out := map[string]int{}
	for _, r := range a.Replicas {
		out[r.ID] = r.Revision
	}
	return out
}

// A 90/10 split between two revisions under load: each revision's share
// of the answers is within 3 points of its weight, and no request fails.
// Bad splits are refused with exit 2 naming the field.
func TestAppTrafficSplitUnderLoad(t *testing.T) {
	d := startDaemon(t)
	d.exampleImage("hello")
	if r, _ := d.deployFile(revManifest(2, "v1")); r.code != 0 {
		t.Fatalf("deploy revision 1: %d %s", r.code, r.stderr)
	}
	if r, _ := d.deployFile(revManifest(2, "v2")); r.code != 0 {
		t.Fatalf("deploy revision 2: %d %s", r.code, r.stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"1=50", "9=50"}, "traffic[1].revision"},
		{[]string{"1=50", "2=40"}, "add up to 90"},
	} {
		if r := d.shoal(append([]string{"app", "traffic", "hello"}, c.args...)...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Fatalf("traffic %v: exit %d %q; want 2 naming %s", c.args, r.code, r.stderr, c.want)
		}
	}
	r := d.shoal("app", "traffic", "hello", "1=90", "2=10")
	if r.code != 0 {
		t.Fatalf("traffic 1=90 2=10: %d %s", r.code, r.stderr)
	}
	d.waitApp("hello", "both revisions ready", func(a types.App) bool {
		return len(pids(a, 1, "ready")) >= 1 && len(pids(a, 2, "ready")) >= 1
	})
	proxy := d.proxyAddr()
	const n = 3000
	s := startSteady(proxy, "hello", "/", 4, n, 0)
	s.done.Wait()
	s.end()
	if s.failed != 0 {
		t.Fatalf("%d of %d requests failed; first: %s", s.failed, s.n, s.first)
	}
	revs := revisionOf(d.app("hello"))
	count := map[int]int{}
	for id, k := range s.by {
		count[revs[id]] += k
	}
	share2 := float64(count[2]) * 100 / float64(s.n)
	t.Logf("90/10 split: %d requests, by revision %v (revision 2: %.1f%%)", s.n, count, share2)
	if count[0] != 0 || share2 < 7 || share2 > 13 {
		t.Fatalf("answers by revision %v of %d: revision 2 had %.1f%%, want 10±3", count, s.n, share2)
	}
	a := d.app("hello")
	if len(a.Traffic) != 2 || a.Traffic[0] != (types.TrafficTarget{Revision: 1, Percent: 90}) {
		t.Fatalf("app traffic: %+v", a.Traffic)
	}
}
