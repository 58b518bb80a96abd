package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
)

func newAppVolumesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volumes",
		Short: "An app's volumes on the node the command talks to",
		Args:  exactArgs(0),
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "prune NAME",
		Short: "Remove the volumes a deployed app no longer uses",
		Long: `Remove the volumes of a deployed app that it does not use, on the node the
command talks to: a stateful app's copies of the ordinals it no longer runs
(kept by a scale-down: db's data-3 once db runs 3), and volumes an earlier
revision declared. Their data is gone. shoal volume rm removes the volumes
of a removed app.`,
		Example: `  shoal app scale db --max 2
  shoal app volumes prune db`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out types.PruneVolumes
			if err := g.call(cmd, "POST", "/v1/volumes/"+url.PathEscape(args[0])+"/prune", nil, &out); err != nil {
				return err
			}
			if len(out.Removed) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: no volume to prune\n", out.App)
			}
			for _, v := range out.Removed {
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s:%s\n", out.App, v)
			}
			return nil
		},
	})
	return cmd
}
