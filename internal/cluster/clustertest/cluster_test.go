package clustertest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// Clusters started at the same time each get a bridge of their own: one
// that loses the race for a number takes the next instead of failing.
func TestAddBridgeConcurrent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it makes bridges on the host")
	}
	const tag, clusters = "tb", 6
	got := make([]int, clusters)
	errs := make([]error, clusters)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = addBridge(tag, 0)
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for i, n := range got {
		if errs[i] == nil {
			t.Cleanup(func() { ip("link", "del", bridgeName(tag, n)) })
		}
	}
	for i, n := range got {
		if errs[i] != nil || seen[n] || !linkExists(bridgeName(tag, n)) {
			t.Fatalf("cluster %d: bridge number %d (%v); all: %v", i, n, errs[i], got)
		}
		seen[n] = true
	}
	// A number asked for is that one, or an error naming its bridge.
	n := got[0]
	if _, err := addBridge(tag, n); err == nil || !linkExists(bridgeName(tag, n)) {
		t.Fatalf("bridge %d asked for again: %v", n, err)
	} else if want := fmt.Sprintf("bridge %s is on the host already", bridgeName(tag, n)); !strings.Contains(err.Error(), want) {
		t.Fatalf("bridge %d asked for again: %v, want %q", n, err, want)
	}
}
