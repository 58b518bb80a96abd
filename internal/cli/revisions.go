package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
)

// rolloutPoll is how often a waiting deploy asks for the rollout's progress.
const rolloutPoll = 50 * time.Millisecond

// waitRollout polls the app until the rollout of revision rev ends,
// printing a line each time its progress changes (progress may be nil for
// silence). It returns the app as it was at the end, and an error (exit 1)
// when the revision was rolled back, failed or is not done in time.
func (g *globals) waitRollout(cmd *cobra.Command, name string, rev int, timeout time.Duration, progress io.Writer) (types.App, error) {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		var a types.App
		if err := g.call(cmd, "GET", appPath(name), nil, &a); err != nil {
			return a, err
		}
		ro := a.Rollout
		switch {
		case ro == nil:
			return a, nil // a daemon that keeps no rollouts
		case ro.Revision != rev && a.Revision != rev:
			return a, fmt.Errorf("revision %d is no longer the app's (now revision %d)", rev, a.Revision)
		case ro.Revision != rev:
			return a, nil // no rollout of its own: it was current already
		}
		line := fmt.Sprintf("revision %d: %d/%d ready", rev, ro.Ready, ro.Want)
		if ro.Failures > 0 {
			line += fmt.Sprintf(", %d failed: %s", ro.Failures, ro.Reason)
		}
		if progress != nil && line != last && ro.State == types.RolloutProgressing {
			fmt.Fprintln(progress, line)
			last = line
		}
		switch ro.State {
		case types.RolloutDone:
			if progress != nil {
				fmt.Fprintf(progress, "revision %d: rolled out (%s)\n", rev, ro.Reason)
			}
			return a, nil
		case types.RolloutRolledBack:
			return a, fmt.Errorf("revision %d rolled back to revision %d: %s", rev, ro.From, ro.Reason)
		case types.RolloutFailed:
			return a, fmt.Errorf("revision %d failed: %s", rev, ro.Reason)
		}
		if time.Now().After(deadline) {
			return a, fmt.Errorf("revision %d: %d/%d ready after %s; it goes on rolling out (see shoal app status %s)",
				rev, ro.Ready, ro.Want, timeout, name)
		}
		select {
		case <-cmd.Context().Done():
			return a, cmd.Context().Err()
		case <-time.After(rolloutPoll):
		}
	}
}

func newAppRollbackCmd(g *globals) *cobra.Command {
	var to int
	var out string
	cmd := &cobra.Command{
		Use:   "rollback NAME [--to N]",
		Short: "Send all of an app's traffic back to an earlier revision at once",
		Long: `Make an earlier revision (--to N, default the one before the current) the app's
current revision and send it all the traffic at once. Its replicas kept frozen
since it was replaced (for scale.rollback_grace) thaw in about a millisecond;
if none are left, new ones start while requests wait. The revision left behind
drains and is kept frozen in turn.`,
		Example: `  shoal app rollback hello
  shoal app rollback hello --to 3`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if to < 0 {
				return usageErrorf("--to %d: must be a revision number (1 or more)", to)
			}
			var a types.App
			if err := g.call(cmd, "POST", appPath(args[0], "/rollback"), types.RollbackRequest{To: to}, &a); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), a)
			}
			from := 0
			if a.Rollout != nil {
				from = a.Rollout.From
			}
			if a.Rollout != nil && a.Rollout.State == types.RolloutProgressing {
				// A stateful app: its ordinals go back one at a time.
				fmt.Fprintf(cmd.OutOrStdout(), "%s: revision %d is current (rolled back from revision %d); %s: shoal app status %s shows the rollout\n",
					a.Name, a.Revision, from, a.Rollout.Reason, a.Name)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: revision %d takes all traffic (rolled back from revision %d)\n", a.Name, a.Revision, from)
			return nil
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "the revision to go back to (default: the one before the current)")
	outputFlag(cmd, &out)
	return cmd
}

func newAppTrafficCmd(g *globals) *cobra.Command {
	var sticky bool
	var out string
	cmd := &cobra.Command{
		Use:   "traffic NAME [REVISION=PERCENT...] [--sticky]",
		Short: "Split an app's traffic between revisions, or show the split",
		Long: `Give each revision a share of the app's requests in percent; the shares are
whole numbers that add up to 100, and each revision must exist. Each revision
with a share keeps at least one replica while the app is in use, and the
autoscaler's replica count is split by the shares. --sticky keeps a client on
the replica it first reached (cookie shoal-replica) while that replica serves;
a call without it turns stickiness off. Either holds until the next deploy,
which sets it from shoal.toml ([traffic] sticky = true). Without shares, print the current split. The next deploy sends all traffic to
its new revision once that is ready.`,
		Example: `  shoal app traffic hello 3=90 4=10
  shoal app traffic hello 3=50 4=50 --sticky
  shoal app traffic hello`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			var a types.App
			if len(args) == 1 {
				if cmd.Flags().Changed("sticky") {
					return usageErrorf("--sticky needs the shares: shoal app traffic %s REVISION=PERCENT...", args[0])
				}
				if err := g.call(cmd, "GET", appPath(args[0]), nil, &a); err != nil {
					return err
				}
			} else {
				req, err := parseTraffic(args[1:])
				if err != nil {
					return err
				}
				req.Sticky = sticky
				if err := g.call(cmd, "PUT", appPath(args[0], "/traffic"), req, &a); err != nil {
					return err
				}
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), a)
			}
			var rows [][]string
			for _, t := range a.Traffic {
				ready := 0
				for _, r := range a.Replicas {
					if r.Revision == t.Revision && r.State == "ready" {
						ready++
					}
				}
				rows = append(rows, []string{strconv.Itoa(t.Revision), strconv.Itoa(t.Percent) + "%", strconv.Itoa(ready)})
			}
			table(cmd.OutOrStdout(), []string{"REVISION", "TRAFFIC", "READY"}, rows)
			if a.Sticky {
				fmt.Fprintln(cmd.OutOrStdout(), "sticky: a client keeps its replica (cookie shoal-replica)")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&sticky, "sticky", false, "keep each client on its replica by cookie")
	outputFlag(cmd, &out)
	return cmd
}

// parseTraffic reads REVISION=PERCENT arguments; mistakes are usage errors
// naming the argument.
func parseTraffic(args []string) (types.TrafficRequest, error) {
	var req types.TrafficRequest
	sum := 0
	seen := map[int]bool{}
	for _, a := range args {
		r, p, ok := strings.Cut(a, "=")
		if !ok {
			return req, usageErrorf("%q: give REVISION=PERCENT, e.g. 3=90", a)
		}
		rev, err := strconv.Atoi(r)
		if err != nil || rev < 1 {
			return req, usageErrorf("%q: revision %q must be a revision number (1 or more)", a, r)
		}
		pct, err := strconv.Atoi(strings.TrimSuffix(p, "%"))
		if err != nil || pct < 0 || pct > 100 {
			return req, usageErrorf("%q: percent %q must be a whole number from 0 to 100", a, p)
		}
		if seen[rev] {
			return req, usageErrorf("%q: revision %d is given twice", a, rev)
		}
		seen[rev] = true
		sum += pct
		req.Traffic = append(req.Traffic, types.TrafficTarget{Revision: rev, Percent: pct})
	}
	if sum != 100 {
		return req, usageErrorf("the percents add up to %d; they must add up to 100", sum)
	}
	return req, nil
}

// rolloutCell is the app's last rollout in a table cell: "1→2 1/3" (from,
// to, ready of wanted, and failures) while it progresses, else its
// outcome ("done", "2 rolled back", "2 failed"), "-" without one.
func rolloutCell(ro *types.Rollout) string {
	switch {
	case ro == nil:
		return "-"
	case ro.State == types.RolloutProgressing:
		s := strconv.Itoa(ro.Revision)
		if ro.From > 0 {
			s = strconv.Itoa(ro.From) + "→" + s
		}
		s += fmt.Sprintf(" %d/%d", ro.Ready, ro.Want)
		if ro.Failures > 0 {
			s += fmt.Sprintf(" %d failed", ro.Failures)
		}
		return s
	case ro.State == types.RolloutDone:
		return "done"
	default:
		return fmt.Sprintf("%d %s", ro.Revision, strings.ReplaceAll(ro.State, "_", " "))
	}
}

// printRollout adds the rollout and traffic lines to an app's status.
func printRollout(w io.Writer, a types.App) {
	if len(a.Traffic) > 0 {
		parts := make([]string, 0, len(a.Traffic))
		for _, t := range a.Traffic {
			parts = append(parts, fmt.Sprintf("revision %d %d%%", t.Revision, t.Percent))
		}
		s := strings.Join(parts, ", ")
		if a.Sticky {
			s += " (sticky)"
		}
		fmt.Fprintf(w, "traffic:   %s\n", s)
	}
	if ro := a.Rollout; ro != nil {
		s := fmt.Sprintf("revision %d %s", ro.Revision, strings.ReplaceAll(ro.State, "_", " "))
		if ro.From > 0 {
			s += fmt.Sprintf(" (from revision %d)", ro.From)
		}
		if ro.State == types.RolloutProgressing {
			s += fmt.Sprintf(", %d/%d ready", ro.Ready, ro.Want)
			if ro.Failures > 0 {
				s += fmt.Sprintf(", %d failed", ro.Failures)
			}
		}
		if ro.Reason != "" {
			s += ": " + ro.Reason
		}
		fmt.Fprintf(w, "rollout:   %s\n", s)
	}
}
