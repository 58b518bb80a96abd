package cli

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
)

func init() { extraCommands = append(extraCommands, newSecretCmd) }

// maxSecretRead bounds what `shoal secret set` reads: the daemon's bound.
const maxSecretRead = types.MaxSecretValue

func newSecretCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Set, list and remove an app's secrets",
		Long: `An app's secrets are stored encrypted; each replica of the app sees the ones
its shoal.toml names under [secrets] as read-only files /run/secrets/NAME (in
its environment only with env = true). Values are read from standard input or
a file, never from the command line, and never shown again.`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(newSecretSetCmd(g), newSecretLsCmd(g), newSecretRmCmd(g))
	return cmd
}

func secretPath(app, name string) string {
	return appPath(app, "/secrets/", url.PathEscape(name))
}

func newSecretSetCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "set APP NAME [-f FILE]",
		Short: "Set a secret of an app from standard input or a file",
		Long: `Set secret NAME of APP (deployed or not yet) to the bytes of standard input, or
of FILE with -f, exactly as given (printf %s leaves out a newline). The files
of running replicas follow within a moment; a variable (env = true) changes in
replicas started after.`,
		Example: `  printf %s "$DB_PASSWORD" | shoal secret set web db_password
  shoal secret set web tls.key -f server.key`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := readSecret(cmd, file)
			if err != nil {
				return err
			}
			var s types.Secret
			if err := g.call(cmd, "PUT", secretPath(args[0], args[1]), types.SecretRequest{Value: value}, &s); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "set %s of %s (%d bytes)\n", s.Name, args[0], s.Size)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "-", `read the value from this file ("-": standard input)`)
	return cmd
}

// readSecret reads a value from file, or from standard input for "-",
// which must not be a terminal.
func readSecret(cmd *cobra.Command, file string) ([]byte, error) {
	var in io.Reader
	if file == "-" {
		in = cmd.InOrStdin()
		if f, ok := in.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				return nil, usageErrorf("the value comes from standard input (a pipe or a file) or -f FILE, never from the command line")
			}
		}
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, usageErrorf("-f %s: cannot read: %v", file, unwrapPathErr(err))
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, maxSecretRead+1))
	switch {
	case err != nil && file != "-":
		// A folder, or a read that failed: as a file that cannot be opened.
		return nil, usageErrorf("-f %s: cannot read: %v", file, unwrapPathErr(err))
	case err != nil:
		return nil, fmt.Errorf("read the secret from standard input: %w", err)
	case len(b) > maxSecretRead:
		return nil, usageErrorf("-f %s: larger than %d bytes", file, maxSecretRead)
	}
	return b, nil
}

func newSecretLsCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:     "ls APP",
		Aliases: []string{"list"},
		Short:   "List an app's secrets: names, sizes and update times, never values",
		Example: `  shoal secret ls web`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []types.Secret
			if err := g.get(cmd, out, appPath(args[0], "/secrets"), &list); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), list)
			}
			var rows [][]string
			for _, s := range list {
				rows = append(rows, []string{s.Name, strconv.Itoa(s.Size), s.Updated.Format("2006-01-02T15:04:05Z07:00") + " (" + ago(s.Updated) + ")"})
			}
			table(cmd.OutOrStdout(), []string{"NAME", "BYTES", "UPDATED"}, rows)
			return nil
		},
	}
	outputFlag(cmd, &out)
	return cmd
}

func newSecretRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm APP NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove secrets of an app (replicas started later lack them)",
		Example: `  shoal secret rm web db_password`,
		Args:    minArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range args[1:] {
				if err := g.call(cmd, "DELETE", secretPath(args[0], name), nil, nil); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "removed", name, "of", args[0])
			}
			return nil
		},
	}
}
