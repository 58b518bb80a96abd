package cli

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/units"
)

func newImageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build, import, pull, list, inspect and remove images",
		Args:  exactArgs(0),
	}
	cmd.AddCommand(newImageBuildCmd(g), newImageImportCmd(g), newImagePullCmd(g),
		newImageLsCmd(g), newImageInspectCmd(g), newImageRmCmd(g))
	return cmd
}

func newImageBuildCmd(g *globals) *cobra.Command {
	var req types.BuildRequest
	var ports []string
	cmd := &cobra.Command{
		Use:   "build DIR --tag NAME:TAG",
		Short: "Make an OCI image of one layer from a folder",
		Long: `Make a real OCI image (manifest, config, one gzip layer) from the contents
of DIR. DIR is read by the daemon, so it must be on the daemon's host.`,
		Example: `  shoal image build ./rootfs --tag hello:1 --entrypoint /hello --port 8080`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := localPath(args[0], true)
			if err != nil {
				return err
			}
			if req.Tag == "" {
				return usageErrorf("--tag is required (NAME:TAG)")
			}
			for _, p := range ports {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil || n < 1 || n > 65535 {
					return usageErrorf("--port %q: must be a port number 1-65535", p)
				}
				req.Ports = append(req.Ports, n)
			}
			for _, e := range req.Env {
				if !strings.Contains(e, "=") {
					return usageErrorf("--env %q: must be KEY=VALUE", e)
				}
			}
			req.Dir = dir
			var img types.Image
			if err := g.call(cmd, "POST", "/v1/images/build", req, &img); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", img.Ref, img.Digest)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&req.Tag, "tag", "t", "", "image reference NAME:TAG (required)")
	f.StringArrayVar(&req.Entrypoint, "entrypoint", nil, "entrypoint path and arguments (repeat for each word)")
	f.StringArrayVar(&req.Cmd, "cmd", nil, "default command argument (repeat for each word)")
	f.StringArrayVarP(&req.Env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVarP(&req.Workdir, "workdir", "w", "", "working directory in the container")
	f.StringArrayVarP(&ports, "port", "p", nil, "port the image listens on (repeatable)")
	return cmd
}

func newImageImportCmd(g *globals) *cobra.Command {
	var tag string
	cmd := &cobra.Command{
		Use:   "import FILE|DIR [--tag NAME:TAG]",
		Short: "Import an OCI layout (folder or tar), a docker-archive or a rootfs tar",
		Long: `Import images from an OCI image layout (a folder or a tar of one, as made by
umoci, buildah or skopeo), a docker-archive (the format of "docker save"), or a
plain tar of a root filesystem (then --tag is required). The path is read by
the daemon, so it must be on the daemon's host. Nothing is kept when any part
of the input is refused.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := localPath(args[0], false)
			if err != nil {
				return err
			}
			var imgs []types.Image
			if err := g.call(cmd, "POST", "/v1/images/import", types.ImportRequest{Path: p, Tag: tag}, &imgs); err != nil {
				return err
			}
			for _, img := range imgs {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", img.Ref, img.Digest)
			}
			if len(imgs) > 0 {
				printNotes(cmd, imgs[0].Notes)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&tag, "tag", "t", "", "reference NAME:TAG for the imported image")
	return cmd
}

func newImagePullCmd(g *globals) *cobra.Command {
	var insecure bool
	var creds, credsFile, caFile string
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image from an OCI registry",
		Long: `Pull an image from an OCI registry into the daemon's image store.

Credentials: --creds USER:PASSWORD, --creds-file FILE (one line
USER:PASSWORD), else what this user's auth files hold for the registry, the
way podman and docker find them ($REGISTRY_AUTH_FILE,
${XDG_RUNTIME_DIR}/containers/auth.json, ~/.config/containers/auth.json,
~/.docker/config.json, credential helpers included); they are sent to the
daemon with the request. With none of these the daemon uses its own host's
auth files.

TLS: the daemon trusts the system's CAs, the registry's folder in
/etc/containers/certs.d/HOST[:PORT]/ or /etc/docker/certs.d/HOST[:PORT]/
on its host (*.crt CAs, client.cert and client.key a client certificate),
and --ca-file. Mirrors come from the daemon host's
/etc/containers/registries.conf ([[registry]] tables).`,
		Example: `  shoal image pull 127.0.0.1:5000/hello:1 --insecure
  shoal image pull registry.example.com/team/app:1 --creds-file ~/.app-registry --ca-file team-ca.crt`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := types.PullRequest{Ref: args[0], Insecure: insecure}
			auth, err := pullAuth(cmd.Context(), args[0], creds, credsFile)
			if err != nil {
				return err
			}
			req.Auth = auth
			if caFile != "" {
				if req.CA, err = readCA(caFile); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "pulling %s ...\n", args[0])
			var img types.Image
			if err := g.call(cmd, "POST", "/v1/images/pull", req, &img); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", img.Ref, img.Digest)
			printNotes(cmd, img.Notes)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&insecure, "insecure", false, "use plain HTTP (for a registry on loopback)")
	f.StringVar(&creds, "creds", "", "registry credentials USER:PASSWORD")
	f.StringVar(&credsFile, "creds-file", "", "file holding the registry credentials as one line USER:PASSWORD")
	f.StringVar(&caFile, "ca-file", "", "PEM file of the CA that signed the registry's certificate")
	return cmd
}

func newImageLsCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List images",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var imgs []types.Image
			if err := g.get(cmd, out, "/v1/images", &imgs); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), imgs)
			}
			var rows [][]string
			for _, i := range imgs {
				rows = append(rows, []string{orDash(i.Ref), short(i.ID, 12), units.FormatBytes(i.Size), strconv.Itoa(i.Layers), ago(i.Created)})
			}
			table(cmd.OutOrStdout(), []string{"REF", "ID", "SIZE", "LAYERS", "CREATED"}, rows)
			return nil
		},
	}
	outputFlag(cmd, &out)
	return cmd
}

func newImageInspectCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "inspect REF",
		Short: "Show an image's digest, config and layers",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var img types.Image
			if err := g.get(cmd, out, "/v1/images/"+url.PathEscape(args[0]), &img); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), img)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "ref:         %s\ndigest:     %s\nid:          %s\nsize:        %s\nlayers:      %d\ncreated:     %s\n",
				orDash(img.Ref), img.Digest, img.ID, units.FormatBytes(img.Size), img.Layers, img.Created.Format(time.RFC3339))
			fmt.Fprintf(w, "entrypoint:  %s\ncmd:         %s\nworkdir:     %s\nports:       %s\n",
				strings.Join(img.Entrypoint, " "), strings.Join(img.Cmd, " "), orDash(img.WorkingDir), strings.Join(img.Ports, " "))
			for _, e := range img.Env {
				fmt.Fprintf(w, "env:         %s\n", e)
			}
			return nil
		},
	}
	outputFlag(cmd, &out)
	return cmd
}

func newImageRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm REF...",
		Aliases: []string{"remove"},
		Short:   "Remove images (layers no other image uses are deleted)",
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			for _, ref := range args {
				if err := c.Do(cmd.Context(), "DELETE", "/v1/images/"+url.PathEscape(ref), nil, nil); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "removed", ref)
			}
			return nil
		},
	}
}

// localPath makes p absolute and checks that it can be read, so the error
// names the file before anything is sent to the daemon.
func localPath(p string, wantDir bool) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", usageErrorf("%s: %v", p, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", usageErrorf("%s: cannot read: %v", p, unwrapPathErr(err))
	}
	if wantDir && !st.IsDir() {
		return "", usageErrorf("%s: not a directory", p)
	}
	if !st.IsDir() {
		f, err := os.Open(abs)
		if err != nil {
			return "", usageErrorf("%s: cannot read: %v", p, unwrapPathErr(err))
		}
		f.Close()
	}
	return abs, nil
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// printNotes writes what an import or pull left out to stderr.
func printNotes(cmd *cobra.Command, notes []string) {
	for _, n := range notes {
		fmt.Fprintln(cmd.ErrOrStderr(), "note:", n)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
