package cli

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/units"
)

func newRunCmd(g *globals) *cobra.Command {
	var req types.RunRequest
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run [flags] IMAGE [CMD...]",
		Short: "Run a command in a new container and stream its output",
		Long: `Run a command in a new container of IMAGE, stream its stdout and stderr, and
exit with its exit code. A container killed by its memory limit exits 137 and
"out of memory" is printed on stderr; one stopped by --timeout exits 137 too.
Without --rm the stopped container stays listed by "shoal ps -a" until
"shoal rm ID".`,
		Example: `  shoal run --rm busybox:1 echo hello
  shoal run --rm --memory 64Mi --cpus 0.5 --timeout 10s app:1 ./test.sh`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.Memory != "" {
				if _, err := units.ParseBytes(req.Memory); err != nil {
					return usageErrorf("--memory: %v", err)
				}
			}
			if req.CPUs < 0 || math.IsNaN(req.CPUs) || math.IsInf(req.CPUs, 0) || req.CPUs > 1024 {
				return usageErrorf("--cpus %v: must be a number of cores from 0 to 1024", req.CPUs)
			}
			if req.Pids < 0 {
				return usageErrorf("--pids %d: must not be negative", req.Pids)
			}
			if req.Shares == 1 || req.Shares > 262144 {
				return usageErrorf("--cpu-shares %d: must be from 2 to 262144", req.Shares)
			}
			if req.Network != "none" && req.Network != "bridge" {
				return usageErrorf("--network %q: use none or bridge", req.Network)
			}
			if timeout < 0 {
				return usageErrorf("--timeout %v: must not be negative", timeout)
			}
			if timeout > 0 {
				req.Timeout = timeout.String()
			}
			req.Image = args[0]
			req.Args = commandArgs(args)
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.send(cmd.Context(), "POST", "/v1/containers/run", req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			exit, err := types.ReadFrames(resp.Body, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				if cmd.Context().Err() != nil {
					return exitError{130}
				}
				return err
			}
			stderr := cmd.ErrOrStderr()
			switch {
			case exit.Error != "":
				fmt.Fprintf(stderr, "shoal: container %s: %s\n", exit.ID, exit.Error)
			case exit.OOMKilled && exit.Code != 0:
				fmt.Fprintf(stderr, "shoal: container %s was killed: out of memory (limit %s)\n", exit.ID, req.Memory)
			case exit.TimedOut:
				fmt.Fprintf(stderr, "shoal: container %s was killed: timeout after %s\n", exit.ID, req.Timeout)
			}
			if exit.Code != 0 {
				return exitError{exit.Code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false)
	f.BoolVar(&req.Remove, "rm", false, "remove the container when it exits")
	f.StringVarP(&req.Memory, "memory", "m", "", "memory limit, e.g. 64Mi or 1G (swap is limited to the same)")
	f.Float64Var(&req.CPUs, "cpus", 0, "CPU limit in cores, e.g. 0.5")
	f.Uint64Var(&req.Shares, "cpu-shares", 0, "relative CPU weight against other containers, 2-262144 (default 1024)")
	f.Int64Var(&req.Pids, "pids", 0, "maximum number of processes (default 1024)")
	f.StringVar(&req.Network, "network", "none", "network: none or bridge")
	f.DurationVar(&timeout, "timeout", 0, "kill the container after this long, e.g. 10s")
	f.StringArrayVarP(&req.Env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVarP(&req.Workdir, "workdir", "w", "", "working directory in the container")
	return cmd
}

func newPsCmd(g *globals) *cobra.Command {
	var out string
	var all bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List containers",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cs []types.Container
			if err := g.get(cmd, out, "/v1/containers", &cs); err != nil {
				return err
			}
			if !all {
				kept := cs[:0]
				for _, c := range cs {
					if c.Status != "stopped" {
						kept = append(kept, c)
					}
				}
				cs = kept
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), cs)
			}
			var rows [][]string
			for _, c := range cs {
				pid := "-"
				if c.Pid > 0 {
					pid = strconv.Itoa(c.Pid)
				}
				rows = append(rows, []string{c.ID, orDash(c.Image), c.Status, pid, ago(c.Created), fmt.Sprint(c.Command)})
			}
			table(cmd.OutOrStdout(), []string{"ID", "IMAGE", "STATUS", "PID", "CREATED", "COMMAND"}, rows)
			return nil
		},
	}
	outputFlag(cmd, &out)
	cmd.Flags().BoolVarP(&all, "all", "a", false, "also list stopped containers")
	return cmd
}

func newRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "Remove containers (a running one is killed first)",
		Args:  minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := c.Do(cmd.Context(), "DELETE", "/v1/containers/"+url.PathEscape(id), nil, nil); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "removed", id)
			}
			return nil
		},
	}
}

func newInfoCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "info",
		Short: "Show the daemon's health, runtime, store and data directory",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var h types.Health
			if err := g.get(cmd, out, "/v1/health", &h); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), h)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "status:      %s\nversion:     %s\nruntime:     %s\ncgroups:     %s\nstore:       %s\ndata dir:    %s\ncontainers:  %d\nimages:      %d\n",
				h.Status, h.Version, h.Runtime, h.CgroupMode, h.Store, h.DataDir, h.Containers, h.Images)
			if h.Proxy != "" {
				fmt.Fprintf(w, "proxy:       %s\n", h.Proxy)
			}
			if h.ProxyTLS != "" {
				fmt.Fprintf(w, "proxy tls:   %s\n", h.ProxyTLS)
			}
			for _, n := range h.Notes {
				fmt.Fprintf(w, "note:        %s\n", n)
			}
			return nil
		},
	}
	outputFlag(cmd, &out)
	return cmd
}
