package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
)

func init() { extraCommands = append(extraCommands, newEventsCmd) }

func newEventsCmd(g *globals) *cobra.Command {
	var out, app string
	var follow bool
	var after int64
	cmd := &cobra.Command{
		Use:   "events [--app NAME] [--follow]",
		Short: "Show the event log: scaling decisions and replica changes, with reasons",
		Long: `Print the event log: every scaling decision and every change of a replica's
state, with the reason and the inputs behind it (in-flight requests, rates,
CPU). --follow keeps printing new events as they happen (Ctrl-C ends it).
With --output json each event is one JSON object on a line of its own, with
or without --follow.`,
		Example: `  shoal events
  shoal events --app hello --follow
  shoal events --after 120 --output json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(out); err != nil {
				return err
			}
			if after < 0 {
				return usageErrorf("--after %d: must be 0 or more", after)
			}
			q := url.Values{}
			if after > 0 {
				q.Set("after", strconv.FormatInt(after, 10))
			}
			if app != "" {
				q.Set("app", app)
			}
			if !follow {
				var evs []types.Event
				if err := g.call(cmd, "GET", "/v1/events?"+q.Encode(), nil, &evs); err != nil {
					return err
				}
				if out == "json" {
					return printJSONLines(cmd.OutOrStdout(), evs)
				}
				var rows [][]string
				for _, e := range evs {
					rows = append(rows, eventRow(e))
				}
				table(cmd.OutOrStdout(), eventHeader, rows)
				return nil
			}
			q.Set("follow", "true")
			return g.followEvents(cmd, "/v1/events?"+q.Encode(), out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&app, "app", "", "only the events of this app")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	f.Int64Var(&after, "after", 0, "only events with a sequence number above this")
	outputFlag(cmd, &out)
	return cmd
}

var eventHeader = []string{"SEQ", "TIME", "KIND", "APP", "REPLICA", "REASON", "INPUTS"}

func eventRow(e types.Event) []string {
	return []string{strconv.FormatInt(e.Seq, 10), e.Time.Local().Format("15:04:05.000"), e.Kind,
		orDash(e.App), orDash(e.Replica), e.Reason, formatInputs(e.Inputs)}
}

// formatInputs prints inputs as k=v pairs in key order.
func formatInputs(in map[string]float64) string {
	if len(in) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatFloat(in[k], 'g', 4, 64)
	}
	return strings.Join(parts, " ")
}

// followEvents reads the server-sent event stream at path and prints each
// event as it comes, until the stream or the command ends.
func (g *globals) followEvents(cmd *cobra.Command, path, out string) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	resp, err := c.send(cmd.Context(), "GET", path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	w := cmd.OutOrStdout()
	if out != "json" {
		fmt.Fprintf(w, "%-6s %-12s %-10s %-14s %-14s %s\n", "SEQ", "TIME", "KIND", "APP", "REPLICA", "REASON (INPUTS)")
	}
	err = readSSE(resp.Body, func(data []byte) error {
		var e types.Event
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("event stream: %w", err)
		}
		if out == "json" {
			return printJSONLines(w, []types.Event{e})
		}
		r := eventRow(e)
		_, err := fmt.Fprintf(w, "%-6s %-12s %-10s %-14s %-14s %s (%s)\n", r[0], r[1], r[2], r[3], r[4], r[5], r[6])
		return err
	})
	if cmd.Context().Err() != nil {
		return nil // interrupted: the normal end of --follow
	}
	return err
}

// printJSONLines prints each event as one JSON object on a line of its own.
func printJSONLines(w io.Writer, evs []types.Event) error {
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
		if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}

// readSSE calls fn with the data of each event of a server-sent event
// stream; the data lines of one event are joined with newlines.
func readSSE(r io.Reader, fn func(data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				if err := fn([]byte(strings.Join(data, "\n"))); err != nil {
					return err
				}
				data = data[:0]
			}
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	return sc.Err()
}
