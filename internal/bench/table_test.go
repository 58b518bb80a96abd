package bench

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestTableMarkdown(t *testing.T) {
	rep := &Report{Suite: "demo", Title: "Demo", Command: "shoal bench demo"}
	tab := Table{Title: "Reads", Note: "One read.", Unit: "MB/s", HigherIsBetter: true, Baseline: "host",
		Rows: []Row{
			{Name: "host", Command: "dd if=f | x", Values: []float64{100, 110, 90}},
			{Name: "shoal", Command: "shoal run dd", Values: []float64{50, 55, 45}},
			{Name: "vm", Err: "no KVM"},
		}}
	rep.Table(tab)
	rep.Para("shoal reads at %s of the host's rate.", FormatRatio(tab.Ratio("shoal", "host")))
	md := rep.Section()
	for _, want := range []string{
		"## Demo",
		"#### Reads",
		"Command: `shoal bench demo`. One read. Values in MB/s (higher is better)",
		"| subject | exact command | median | p99 | spread | stddev | runs | vs host |",
		"| host | `dd if=f \\| x` | 100 | 110 | 90.0–110 | 10.0 | 3 | 1.00× |",
		"| shoal | `shoal run dd` | 50.0 | 54.9 | 45.0–55.0 | 5.00 | 3 | 0.50× |",
		"| vm | – | not run: no KVM ||||||",
		"shoal reads at 0.50× of the host's rate.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	if !math.IsNaN(tab.Median("vm")) || !math.IsNaN(tab.Ratio("nope", "host")) {
		t.Error("a row without numbers has a median")
	}
}

func TestStats(t *testing.T) {
	s := Stats([]float64{4, 1, 3, 2})
	if s.N != 4 || s.Median != 2.5 || s.Min != 1 || s.Max != 4 || s.Mean != 2.5 {
		t.Errorf("Stats = %+v", s)
	}
	if e := Stats(nil); e.N != 0 || !math.IsNaN(e.Median) {
		t.Errorf("Stats(nil) = %+v", e)
	}
}

func TestMeasureInterleavesAndKeepsErrors(t *testing.T) {
	var order []string
	subj := func(name string, fail int) Subject {
		return Subject{Name: name, Run: func(_ context.Context, i int) (float64, error) {
			order = append(order, name)
			if len(order) == fail {
				return 0, errors.New("boom")
			}
			return float64(i), nil
		}}
	}
	rows, err := Measure(context.Background(), Options{}, 1, 2, []Subject{subj("a", 0), subj("b", 4)})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ""); got != "ababa" {
		t.Errorf("order = %s, want ababa", got)
	}
	if len(rows[0].Values) != 2 || rows[0].Values[0] != 3 || !rows[0].OK() {
		t.Errorf("row a = %+v", rows[0])
	}
	if rows[1].OK() || rows[1].Err != "boom" {
		t.Errorf("row b = %+v", rows[1])
	}
}

func TestRegistryOrder(t *testing.T) {
	noop := func(context.Context, Options) (*Report, error) { return nil, nil }
	Register(Suite{Name: "zz-test", Run: noop})
	Register(Suite{Name: "lifecycle", Run: noop})
	var names []string
	for _, s := range Suites() {
		names = append(names, s.Name)
	}
	if len(names) != 2 || names[0] != "lifecycle" {
		t.Errorf("suites = %v, want lifecycle first", names)
	}
	if !lessSuite("lifecycle", "serving") || !lessSuite("storage", "host") || !lessSuite("host", "aaa") || !lessSuite("aaa", "bbb") {
		t.Error("lessSuite does not follow SuiteOrder")
	}
	defer func() {
		if recover() == nil {
			t.Error("a duplicate registration did not panic")
		}
	}()
	Register(Suite{Name: "lifecycle", Run: noop})
}
