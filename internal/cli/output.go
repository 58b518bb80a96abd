package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// outputFlag adds --output/-o to a read command.
func outputFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVarP(dst, "output", "o", "table", "output format: table or json")
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usageErrorf("--output %q: use table or json", o)
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows aligned in columns.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// ago prints a time as a short age ("3s", "5m", "2h", "4d").
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func short(id string, n int) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > n {
		return id[:n]
	}
	return id
}

// get checks --output and fetches path into v: the first half of every read
// command.
func (g *globals) get(cmd *cobra.Command, out, path string, v any) error {
	if err := checkOutput(out); err != nil {
		return err
	}
	return g.call(cmd, "GET", path, nil, v)
}

// call sends one API request with an optional JSON body and decodes the
// answer into out (if not nil).
func (g *globals) call(cmd *cobra.Command, method, path string, body, out any) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	return c.Do(cmd.Context(), method, path, body, out)
}
