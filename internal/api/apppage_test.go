package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// GET /v1/apps pages by name (?limit=&after=) and filters by state; a
// bad limit or state is a 400 naming the field.
func TestListAppsPaged(t *testing.T) {
	ts, fa, _ := appServer(t)
	for i := 1; i <= 25; i++ {
		state := "idle"
		if i%5 == 0 {
			state = "running"
		}
		name := fmt.Sprintf("app%02d", i)
		fa.apps[name] = types.App{Name: name, State: state}
	}
	list := func(query string) []string {
		t.Helper()
		resp, b := do(t, "GET", ts.URL+"/v1/apps"+query, "")
		if resp.StatusCode != 200 {
			t.Fatalf("GET /v1/apps%s: %d %s", query, resp.StatusCode, b)
		}
		var apps []types.App
		if err := json.Unmarshal(b, &apps); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range apps {
			names = append(names, a.Name)
		}
		return names
	}
	if got := list(""); len(got) != 25 || got[0] != "app01" || got[24] != "app25" {
		t.Fatalf("all apps: %v", got)
	}
	if got := strings.Join(list("?limit=3"), ","); got != "app01,app02,app03" {
		t.Fatalf("first page: %s", got)
	}
	if got := strings.Join(list("?limit=3&after=app03"), ","); got != "app04,app05,app06" {
		t.Fatalf("second page: %s", got)
	}
	if got := strings.Join(list("?state=running&after=app05&limit=2"), ","); got != "app10,app15" {
		t.Fatalf("running after app05: %s", got)
	}
	if got := list("?after=app25"); len(got) != 0 {
		t.Fatalf("after the last: %v", got)
	}
	for q, field := range map[string]string{"?limit=0": "limit", "?limit=x": "limit", "?limit=10001": "limit", "?state=asleep": "state"} {
		resp, b := do(t, "GET", ts.URL+"/v1/apps"+q, "")
		if resp.StatusCode != 400 || !strings.Contains(string(b), field) {
			t.Errorf("GET /v1/apps%s: %d %s; want 400 naming %s", q, resp.StatusCode, b, field)
		}
	}
}
