package network

import (
	"strings"
	"testing"
)

// shoal info states the host's ceiling: the bridge's 1024 ports, not a
// /16's 65k addresses; a small subnet's addresses when fewer.
func TestCeiling(t *testing.T) {
	for subnet, want := range map[string]string{
		"10.77.0.0/16": "at most 1024 replicas and bridged containers on this host (a Linux bridge takes 1024 ports, fewer than the subnet's 65533 addresses)",
		"10.77.0.0/24": "at most 253 replicas and bridged containers (the subnet's addresses)",
		"10.77.0.0/22": "at most 1021 replicas",
		"10.77.0.0/21": "at most 1024 replicas",
	} {
		got := (&Manager{o: Options{Bridge: "shoal0", Subnet: subnet}}).Ceiling()
		if !strings.Contains(got, want) || !strings.Contains(got, "bridge shoal0 on "+subnet) {
			t.Errorf("%s: %q, want it to say %q", subnet, got, want)
		}
	}
}
