package cli

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
)

func init() { extraCommands = append(extraCommands, newAppCmd) }

func newAppCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "app",
		Short: "Deploy, list, inspect, scale and remove apps",
		Long: `An app is an image plus a shoal.toml: shoal keeps it at the number of replicas
its traffic needs (from scale.min, possibly 0, up to scale.max), freezes idle
replicas and stops frozen ones, and routes http://<name>.localhost:<proxy port>
to it.`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(newAppDeployCmd(g), newAppLsCmd(g), newAppStatusCmd(g),
		newAppScaleCmd(g), newAppLogsCmd(g), newAppRmCmd(g), newAppRollbackCmd(g), newAppTrafficCmd(g), newAppVolumesCmd(g))
	return cmd
}

func appPath(name string, rest ...string) string {
	return "/v1/apps/" + url.PathEscape(name) + strings.Join(rest, "")
}

func newAppDeployCmd(g *globals) *cobra.Command {
	var file, out string
	var detach bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "deploy [-f shoal.toml] [--detach]",
		Short: "Deploy an app from its shoal.toml (a new revision when it changed)",
		Long: `Send a shoal.toml to the daemon. A new app is created; for an existing app a
new revision is made when the file changed. The file is checked strictly:
unknown keys and bad values are errors that name the key.

A new revision rolls out: its replicas (as many as the app has in service, at
least scale.min) start and become ready while the old ones keep the traffic,
then the traffic moves over and the old replicas drain and stay frozen for
scale.rollback_grace. deploy waits for this and prints the progress; it exits
0 once the revision takes the traffic, and 1 with the reason when it never
became ready and was rolled back. --detach returns at once.`,
		Example: `  shoal app deploy -f shoal.toml
  shoal app deploy -f shoal.toml --detach
  shoal app deploy -f examples/hello/shoal.toml --output json
  cat shoal.toml | shoal app deploy -f -`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			manifest, err := readManifest(cmd, file)
			if err != nil {
				return err
			}
			var app types.App
			if err := g.call(cmd, "POST", "/v1/apps", types.DeployRequest{Manifest: manifest, File: file}, &app); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, warning := range app.Warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", warning)
			}
			if out != "json" {
				fmt.Fprintf(w, "deployed %s revision %d (image %s, scale %d-%d)\n", app.Name, app.Revision, app.Image, app.Min, app.Max)
			}
			var werr error
			if !detach {
				progress := w
				if out == "json" {
					progress = nil
				}
				var a types.App
				a, werr = g.waitRollout(cmd, app.Name, app.Revision, timeout, progress)
				if a.Name != "" {
					a.Warnings = app.Warnings
					app = a
				}
			}
			if app.URL == "" {
				app.URL = g.appURL(cmd, app.Name)
			}
			if out == "json" {
				if err := printJSON(w, app); err != nil {
					return err
				}
				return werr
			}
			if app.URL != "" && werr == nil {
				fmt.Fprintf(w, "url: %s\n", app.URL)
			}
			if app.Error != "" && werr == nil {
				fmt.Fprintf(w, "error: %s (see shoal app status %s)\n", app.Error, app.Name)
			}
			return werr
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "shoal.toml", `the app's shoal.toml ("-": standard input)`)
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "return at once instead of waiting for the rollout")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the rollout (it goes on after)")
	outputFlag(cmd, &out)
	return cmd
}

// readManifest reads the shoal.toml named by -f; a missing or unreadable
// file is a usage error naming it.
func readManifest(cmd *cobra.Command, file string) (string, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20+1))
	} else {
		b, err = os.ReadFile(file)
	}
	switch {
	case err != nil && os.IsNotExist(err):
		return "", usageErrorf("-f %s: no such file (give the app's shoal.toml with -f)", file)
	case err != nil:
		return "", usageErrorf("-f %s: %v", file, err)
	case len(b) > 1<<20:
		return "", usageErrorf("-f %s: larger than 1 MiB; a shoal.toml is a few lines", file)
	case strings.TrimSpace(string(b)) == "":
		return "", usageErrorf("-f %s: empty file", file)
	}
	return string(b), nil
}

// appURL is where the daemon's proxy serves an app, or "" when the daemon
// runs no proxy.
func (g *globals) appURL(cmd *cobra.Command, name string) string {
	var h types.Health
	if err := g.call(cmd, "GET", "/v1/health", nil, &h); err != nil || h.Proxy == "" {
		return ""
	}
	_, port, err := net.SplitHostPort(h.Proxy)
	if err != nil {
		return ""
	}
	if port == "80" {
		return "http://" + name + ".localhost"
	}
	return "http://" + name + ".localhost:" + port
}

func newAppLsCmd(g *globals) *cobra.Command {
	var out string
	var page types.AppPage
	cmd := &cobra.Command{
		Use:     "ls [--limit N] [--after NAME] [--state STATE]",
		Aliases: []string{"list"},
		Short:   "List apps",
		Long: `List apps by name. --limit N shows at most N (a page); --after NAME starts after
that name (the last one of the page before); --state keeps the apps in one state
(idle, running, failing, deleting).`,
		Example: `  shoal app ls
  shoal app ls --limit 50 --after shop --state running
  shoal app ls --output json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("limit") && page.Limit < 1 {
				return usageErrorf("--limit: must be from 1 to %d, got %d", types.MaxAppPage, page.Limit)
			}
			if field, err := page.Check(); err != nil {
				return usageErrorf("--%s: %v", field, err)
			}
			q := url.Values{}
			if page.Limit > 0 {
				q.Set("limit", strconv.Itoa(page.Limit))
			}
			if page.After != "" {
				q.Set("after", page.After)
			}
			if page.State != "" {
				q.Set("state", page.State)
			}
			path := "/v1/apps"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			var apps []types.App
			if err := g.get(cmd, out, path, &apps); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), apps)
			}
			var rows [][]string
			for _, a := range apps {
				rows = append(rows, []string{a.Name, a.Image, strconv.Itoa(a.Revision), rolloutCell(a.Rollout), a.State,
					fmt.Sprintf("%d/%d", a.Ready, len(a.Replicas)), fmt.Sprintf("%d-%d", a.Min, a.Max), orDash(a.URL), ago(a.CreatedAt)})
			}
			table(cmd.OutOrStdout(), []string{"NAME", "IMAGE", "REVISION", "ROLLOUT", "STATE", "READY", "SCALE", "URL", "CREATED"}, rows)
			if page.Limit > 0 && len(apps) == page.Limit {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: shoal app ls --limit %d --after %s\n", page.Limit, apps[len(apps)-1].Name)
			}
			return nil
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().IntVar(&page.Limit, "limit", 0, "show at most N apps")
	cmd.Flags().StringVar(&page.After, "after", "", "start after this app name")
	cmd.Flags().StringVar(&page.State, "state", "", "only apps in this state (idle, running, failing, deleting)")
	return cmd
}

func newAppStatusCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show an app and its replicas",
		Long: `Show an app, its revision and scale bounds, and a table of its replicas with
their state on the ladder pending, starting, ready, frozen, draining, stopped or
failed. A failing app also shows its last error and the last lines its replica
wrote.`,
		Example: `  shoal app status hello
  shoal app status hello --output json | jq '.replicas[] | {id, state, pid}'`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var a types.App
			if err := g.get(cmd, out, appPath(args[0]), &a); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), a)
			}
			printAppStatus(cmd.OutOrStdout(), a)
			return nil
		},
	}
	outputFlag(cmd, &out)
	return cmd
}

func printAppStatus(w io.Writer, a types.App) {
	fmt.Fprintf(w, "name:      %s\nimage:     %s\nrevision:  %d\nstate:     %s\nscale:     %d-%d (%d ready)\n",
		a.Name, a.Image, a.Revision, a.State, a.Min, a.Max, a.Ready)
	if a.URL != "" {
		fmt.Fprintf(w, "url:       %s\n", a.URL)
	}
	if !a.UpdatedAt.IsZero() {
		fmt.Fprintf(w, "updated:   %s (%s)\n", a.UpdatedAt.Local().Format(time.RFC3339), ago(a.UpdatedAt))
	}
	printRollout(w, a)
	if a.Error != "" {
		fmt.Fprintf(w, "error:     %s\n", a.Error)
	}
	for _, l := range a.Log {
		fmt.Fprintf(w, "  | %s\n", l)
	}
	if a.Waiting != "" {
		fmt.Fprintf(w, "waiting:   %s\n", a.Waiting)
	}
	if a.TCP != "" {
		fmt.Fprintf(w, "tcp:       %s\n", a.TCP)
	}
	if a.TCPError != "" {
		fmt.Fprintf(w, "tcp:       not listening: %s\n", a.TCPError)
	}
	if len(a.Replicas) == 0 {
		fmt.Fprintln(w, "replicas:  none")
		return
	}
	fmt.Fprintln(w)
	// A cluster's replicas name their node; a single host's do not.
	clustered := false
	for _, r := range a.Replicas {
		clustered = clustered || r.Node != ""
	}
	var rows [][]string
	for _, r := range a.Replicas {
		pid := "-"
		if r.Pid > 0 {
			pid = strconv.Itoa(r.Pid)
		}
		row := []string{r.ID, strconv.Itoa(r.Revision), r.State}
		if clustered {
			row = append(row, orDash(r.Node))
		}
		rows = append(rows, append(row, pid, orDash(r.Addr), orDash(r.CPUSet),
			ago(r.StartedAt), strconv.Itoa(r.InFlight), orDash(r.Reason)))
	}
	head := []string{"ID", "REVISION", "STATE"}
	if clustered {
		head = append(head, "NODE")
	}
	table(w, append(head, "PID", "ADDR", "CPUS", "STARTED", "IN-FLIGHT", "REASON"), rows)
}

func newAppScaleCmd(g *globals) *cobra.Command {
	var lo, hi int
	cmd := &cobra.Command{
		Use:   "scale NAME [--min N] [--max N]",
		Short: "Change an app's replica bounds",
		Long: `Set the least and the most replicas of an app; the autoscaler keeps it within
them. --min 0 lets an idle app scale to zero. A bound not given is kept.
A stateful app runs a count of ordinals: --max N sets it (--min 0 stops
every ordinal when its [stateful] table has allow_zero = true).`,
		Example: `  shoal app scale hello --min 1 --max 20
  shoal app scale hello --min 0`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var req types.ScaleRequest
			if cmd.Flags().Changed("min") {
				if lo < 0 {
					return usageErrorf("--min %d: must be 0 or more", lo)
				}
				req.Min = &lo
			}
			if cmd.Flags().Changed("max") {
				if hi < 1 {
					return usageErrorf("--max %d: must be at least 1", hi)
				}
				req.Max = &hi
			}
			if req.Min == nil && req.Max == nil {
				return usageErrorf("give --min, --max or both\nRun '%s --help' for usage", cmd.CommandPath())
			}
			if req.Min != nil && req.Max != nil && lo > hi {
				return usageErrorf("--min %d is above --max %d", lo, hi)
			}
			var a types.App
			if err := g.call(cmd, "POST", appPath(args[0], "/scale"), req, &a); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: scale %d-%d\n", a.Name, a.Min, a.Max)
			return nil
		},
	}
	cmd.Flags().IntVar(&lo, "min", 0, "least replicas (0: scale to zero when idle)")
	cmd.Flags().IntVar(&hi, "max", 0, "most replicas")
	return cmd
}

func newAppLogsCmd(g *globals) *cobra.Command {
	var (
		tail               int
		since, replica     string
		follow, timestamps bool
	)
	cmd := &cobra.Command{
		Use:   "logs NAME [--tail N] [--since DURATION|TIME] [--replica ID] [--follow] [--timestamps]",
		Short: "Print what an app's replicas wrote to stdout and stderr",
		Long: `Print what an app's replicas wrote to stdout and stderr, their lines merged
by the time each was written, one line per line written:

  REPLICA | TEXT
  REPLICA | TIME TEXT          (with --timestamps; TIME is RFC 3339 UTC)

as docker compose logs and kubectl logs --prefix show them. Each replica keeps
its last MiB (and the MiB before it); the logs of the five replicas gone last
are kept too. --tail counts the merged lines, after --since; 0 means all kept
lines, so to follow only new lines use --follow --since 0s.`,
		Example: `  shoal app logs hello
  shoal app logs hello --tail 20
  shoal app logs hello --since 10m --replica hello-3f2a
  shoal app logs hello -f --since 0s     # only lines written from now on`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tail < 0 {
				return usageErrorf("--tail %d: must be 0 (all kept lines) or more", tail)
			}
			if _, err := types.ParseSince(since, time.Now()); err != nil {
				return usageErrorf("--since: %v", err)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q := url.Values{"tail": {strconv.Itoa(tail)}}
			if since != "" {
				q.Set("since", since)
			}
			if replica != "" {
				q.Set("replica", replica)
			}
			if follow {
				q.Set("follow", "true")
			}
			if timestamps {
				q.Set("timestamps", "true")
			}
			resp, err := c.send(cmd.Context(), "GET", appPath(args[0], "/logs?", q.Encode()), nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(cmd.OutOrStdout(), resp.Body)
			if follow && cmd.Context().Err() != nil {
				return nil // interrupted: the normal end of --follow
			}
			return err
		},
	}
	cmd.Flags().IntVarP(&tail, "tail", "n", 0, "only the last N lines, merged (0: all kept)")
	cmd.Flags().StringVar(&since, "since", "", "only lines written since a duration ago (10m) or a time (RFC 3339)")
	cmd.Flags().StringVar(&replica, "replica", "", "only the replicas whose id starts with this")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "then print new lines as they are written, of replicas started later too, until interrupted")
	cmd.Flags().BoolVarP(&timestamps, "timestamps", "t", false, "print each line's time")
	return cmd
}

func newAppRmCmd(g *globals) *cobra.Command {
	var volumes bool
	cmd := &cobra.Command{
		Use:     "rm NAME... [--volumes]",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove apps: their replicas drain and stop, their records go",
		Long: `Remove apps: their replicas drain and stop, their records, revisions, logs
and per-replica state go. Their volumes stay (shoal volume ls lists them as
kept) and an app of the same name deployed again mounts them again; with
--volumes they go too (in a cluster, on every node that is up).`,
		Example: `  shoal app rm hello
  shoal app rm hello --volumes`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := ""
			if volumes {
				q = "?volumes=true"
			}
			for _, name := range args {
				if err := g.call(cmd, "DELETE", appPath(name)+q, nil, nil); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "removed", name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&volumes, "volumes", false, "remove the apps' volumes (their data) too")
	return cmd
}
