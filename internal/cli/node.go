package cli

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/units"
)

func init() { extraCommands = append(extraCommands, newNodeCmd) }

func newNodeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List, drain and remove the nodes of a cluster",
		Long: `The nodes of a cluster: daemons that share one etcd store (--store etcd://...).
A node is ready while it renews its lease, draining once drained, and down once
its lease has expired. A daemon on bolt is single-host and has no nodes.`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(newNodeLsCmd(g), newNodeDrainCmd(g), newNodeRmCmd(g))
	return cmd
}

func newNodeLsCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:     "ls",
		Short:   "List the nodes with their state, capacity and the leader",
		Example: "  shoal node ls\n  shoal node ls --output json",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var nodes []types.Node
			if err := g.get(cmd, out, "/v1/nodes", &nodes); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), nodes)
			}
			var rows [][]string
			for _, n := range nodes {
				leader := ""
				if n.Leader {
					leader = "*"
				}
				rows = append(rows, []string{n.Name, orDash(n.Addr), n.State, strconv.Itoa(n.CPUs),
					units.FormatBytes(n.Memory), units.FormatBytes(n.FrozenMemory), leader, ago(n.Joined)})
			}
			table(cmd.OutOrStdout(), []string{"NAME", "ADDR", "STATE", "CPUS", "MEMORY", "FROZEN", "LEADER", "AGE"}, rows)
			return nil
		},
	}
	outputFlag(cmd, &out)
	return cmd
}

func newNodeDrainCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "drain NAME",
		Short:   "Mark a node draining: it stays a member but takes no new work",
		Example: "  shoal node drain n2",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.call(cmd, "POST", "/v1/nodes/"+url.PathEscape(args[0])+"/drain", nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s draining\n", args[0])
			return nil
		},
	}
}

func newNodeRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Short:   "Remove a draining or down node from the cluster",
		Example: "  shoal node drain n2 && shoal node rm n2",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.call(cmd, "DELETE", "/v1/nodes/"+url.PathEscape(args[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s removed\n", args[0])
			return nil
		},
	}
}
