package network

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// teardownMasq removes the masquerade rules the bridge plugin made for the
// attachment id. The plugin removes them itself on DEL only when it still
// finds the interface in the namespace; this covers a namespace that
// vanished first (a reboot, a crash between the unmount and the DEL). The
// rules are found by the comment the plugin puts on them.
func teardownMasq(ctx context.Context, network, id string) error {
	out, err := exec.CommandContext(ctx, "iptables-save", "-t", "nat").Output()
	if err != nil {
		return fmt.Errorf("masquerade rules of %s: iptables-save: %w", id, err)
	}
	comment := fmt.Sprintf("name: %q id: %q", network, id)
	var errs []error
	for line := range strings.SplitSeq(string(out), "\n") {
		if !strings.HasPrefix(line, "-A POSTROUTING ") || !strings.Contains(line, "--comment "+strconv.Quote(comment)) {
			continue
		}
		src, chain := flagValue(line, "-s"), flagValue(line, "-j")
		if src == "" || !strings.HasPrefix(chain, "CNI-") {
			continue
		}
		errs = append(errs,
			iptables(ctx, "-D", "POSTROUTING", "-s", src, "-m", "comment", "--comment", comment, "-j", chain),
			iptables(ctx, "-F", chain),
			iptables(ctx, "-X", chain))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("masquerade rules of %s: %w", id, err)
	}
	return nil
}

// flagValue returns the word after flag in an iptables-save rule line.
func flagValue(line, flag string) string {
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == flag {
			return f[i+1]
		}
	}
	return ""
}

func iptables(ctx context.Context, args ...string) error {
	args = append([]string{"-w", "-t", "nat"}, args...)
	if out, err := exec.CommandContext(ctx, "iptables", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
