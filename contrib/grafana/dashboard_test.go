package grafana

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// check decodes a dashboard strictly against the schema types generated
// from Grafana's own (the foundation SDK's): an unknown field, a field of
// the wrong type or a required field left out is an error, and so is a
// value the schema's constraints refuse. It returns the dashboard and its
// panels other than rows.
func check(raw []byte) (dashboard.Dashboard, []panel, error) {
	plugins.RegisterDefaultPlugins() // panels' options and queries by type
	var d dashboard.Dashboard
	if err := noErrors(d.UnmarshalJSONStrict(raw)); err != nil {
		return d, nil, err
	}
	if err := d.Validate(); err != nil {
		return d, nil, err
	}
	// The SDK's strict decoding of a panel in the dashboard, and of a
	// query in a panel, reports their errors but keeps neither (an empty
	// error list is not nil there): each is decoded again on its own.
	var all struct{ Panels []json.RawMessage }
	if err := json.Unmarshal(raw, &all); err != nil {
		return d, nil, err
	}
	var panels []panel
	for i, pr := range all.Panels {
		var kind struct{ Type string }
		json.Unmarshal(pr, &kind)
		if kind.Type == "row" {
			var r dashboard.RowPanel
			if err := noErrors(r.UnmarshalJSONStrict(pr)); err != nil {
				return d, nil, fmt.Errorf("panels[%d]: %w", i, err)
			}
			if err := r.Validate(); err != nil {
				return d, nil, fmt.Errorf("panels[%d]: %w", i, err)
			}
			continue
		}
		var p dashboard.Panel
		if err := noErrors(p.UnmarshalJSONStrict(pr)); err != nil {
			return d, nil, fmt.Errorf("panels[%d]: %w", i, err)
		}
		if err := p.Validate(); err != nil {
			return d, nil, fmt.Errorf("panels[%d]: %w", i, err)
		}
		var qs struct{ Targets []json.RawMessage }
		json.Unmarshal(pr, &qs)
		out := panel{Panel: p}
		for j, qr := range qs.Targets {
			var q prometheus.Dataquery
			if err := noErrors(q.UnmarshalJSONStrict(qr)); err != nil {
				return d, nil, fmt.Errorf("panels[%d].targets[%d]: %w", i, j, err)
			}
			if err := q.Validate(); err != nil {
				return d, nil, fmt.Errorf("panels[%d].targets[%d]: %w", i, j, err)
			}
			out.queries = append(out.queries, q)
		}
		panels = append(panels, out)
	}
	return d, panels, nil
}

// panel is a dashboard panel with its Prometheus queries.
type panel struct {
	dashboard.Panel
	queries []prometheus.Dataquery
}

// noErrors turns the SDK's empty error list into nil.
func noErrors(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

// shoal.json is a valid Grafana dashboard: it decodes strictly, every panel
// has a query, and every query reads a shoal metric or the daemon's process
// metrics.
func TestDashboardMatchesGrafanaSchema(t *testing.T) {
	raw, err := os.ReadFile("shoal.json")
	if err != nil {
		t.Fatal(err)
	}
	d, panels, err := check(raw)
	if err != nil {
		t.Fatalf("shoal.json against Grafana's dashboard schema:\n%v", err)
	}
	if d.Title == nil || *d.Title != "shoal" || len(panels) == 0 {
		t.Fatalf("shoal.json decoded to title %v with %d panels", d.Title, len(panels))
	}
	queries := 0
	for _, p := range panels {
		title := ""
		if p.Title != nil {
			title = *p.Title
		}
		if len(p.queries) == 0 {
			t.Errorf("panel %q has no query", title)
		}
		for _, q := range p.queries {
			queries++
			if !strings.Contains(q.Expr, "shoal_") && !strings.Contains(q.Expr, "process_") {
				t.Errorf("panel %q: query %q reads neither a shoal metric nor the daemon's process", title, q.Expr)
			}
		}
	}
	if queries == 0 {
		t.Fatal("shoal.json has no query")
	}
}

// The check refuses what Grafana's schema refuses: an unknown field, a
// field of the wrong type, and a panel without its type.
func TestDashboardSchemaCheckRefusesBadDashboards(t *testing.T) {
	raw, err := os.ReadFile("shoal.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, from, to string }{
		{"unknown field", `"graphTooltip": 1,`, `"graphTooltip": 1, "panelz": [],`},
		{"wrong type", `"graphTooltip": 1,`, `"graphTooltip": "shared",`},
		{"legend without calcs", `"showLegend": true,
          "calcs": []`, `"showLegend": true`},
		{"panel without a type", `"type": "timeseries",`, ``},
		{"query with an unknown field", `"refId": "A"`, `"refId": "A", "exprr": "up"`},
	} {
		bad := strings.Replace(string(raw), c.from, c.to, 1)
		if bad == string(raw) {
			t.Fatalf("%s: shoal.json has no %q to change", c.name, c.from)
		}
		if _, _, err := check([]byte(bad)); err == nil {
			t.Errorf("%s: the schema check passed a dashboard Grafana's schema refuses", c.name)
		}
	}
}
