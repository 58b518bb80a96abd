// Package cli is the shoal command: the daemon and every client command,
// built with cobra. Read commands take --output json; usage errors exit 2.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Version is the build version, set by the linker.
var Version = "dev"

// usageError is bad input from the user: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitError carries an exit code without a message (the container's own).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

type globals struct {
	host  string
	token string
}

// Main runs the shoal command with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(stderr, "shoal:", err)
	var ue usageError
	var ae *APIError
	switch {
	case errors.As(err, &ue):
		return 2
	case strings.HasPrefix(err.Error(), "unknown command ") || strings.HasPrefix(err.Error(), "unknown flag"):
		return 2
	case errors.As(err, &ae) && ae.Status == http.StatusBadRequest:
		return 2
	case errdefs.IsInvalid(err):
		return 2
	}
	return 1
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "shoal",
		Short: "shoal runs web apps and untrusted jobs in real Linux containers",
		Long: `shoal runs web apps and untrusted jobs in real Linux containers on an OCI
runtime (runc, or crun where it works), and keeps each app at the size its
traffic needs.

Start the daemon with "shoal daemon" (as root), then use the other commands.
The CLI finds the daemon through --host, $SHOAL_HOST or ` + DefaultHost + `.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w\nRun '%s --help' for usage", err, c.CommandPath())}
	})
	root.PersistentFlags().StringVar(&g.host, "host", "", "daemon address: unix:///path.sock, tcp://host:port (default $SHOAL_HOST or "+DefaultHost+")")
	root.PersistentFlags().StringVar(&g.token, "token", "", "bearer token for a TCP daemon address (default $SHOAL_TOKEN)")
	root.AddCommand(
		newDaemonCmd(),
		newRunCmd(g),
		newPsCmd(g),
		newRmCmd(g),
		newImageCmd(g),
		newInfoCmd(g),
		newVersionCmd(),
	)
	for _, c := range extraCommands {
		root.AddCommand(c(g))
	}
	for _, c := range root.Commands() {
		refuseUnknown(c)
	}
	return root
}

// refuseUnknown makes a command group (such as `shoal app`) that is given
// an unknown subcommand fail as a usage error instead of printing its help
// and exiting 0; given nothing, it prints its help.
func refuseUnknown(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknown(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unknown command %q for %q\nRun '%s --help' for usage", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return cmd.Help()
	}
}

// extraCommands lets other files of this package register commands.
var extraCommands []func(*globals) *cobra.Command

func (g *globals) client() (*Client, error) { return NewClient(g.host, g.token) }

// exactArgs, minArgs and rangeArgs are cobra arg checks that fail as usage errors.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %d argument(s), got %d\nRun '%s --help' for usage", cmd.CommandPath(), n, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s needs at least %d argument(s)\nRun '%s --help' for usage", cmd.CommandPath(), n, cmd.CommandPath())
		}
		return nil
	}
}

// commandArgs returns the command after IMAGE in args: flag parsing stops
// at IMAGE, so a "--" written to set the command apart is still there and
// is dropped here (`shoal run IMAGE -- ls -l` runs `ls -l`).
func commandArgs(args []string) []string {
	cmd := args[1:]
	if len(cmd) > 0 && cmd[0] == "--" {
		cmd = cmd[1:]
	}
	return cmd
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the shoal version",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "shoal", Version)
			return nil
		},
	}
}
