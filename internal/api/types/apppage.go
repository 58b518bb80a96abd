package types

import "fmt"

// AppStates are the states GET /v1/apps?state= filters by (App.State).
var AppStates = []string{"idle", "running", "failing", "deleting"}

// MaxAppPage is the largest page GET /v1/apps?limit= gives.
const MaxAppPage = 10000

// AppPage is a page of GET /v1/apps (?limit=&after=&state=): at most
// Limit apps (0: all) whose name sorts after After, in State when set.
type AppPage struct {
	Limit int
	After string
	State string
}

// Check names the first bad field of the page and why, or returns "", nil.
func (p AppPage) Check() (field string, err error) {
	if p.Limit < 0 || p.Limit > MaxAppPage {
		return "limit", fmt.Errorf("must be from 1 to %d, got %d", MaxAppPage, p.Limit)
	}
	if p.State != "" {
		for _, s := range AppStates {
			if s == p.State {
				return "", nil
			}
		}
		return "state", fmt.Errorf("must be one of %v, got %q", AppStates, p.State)
	}
	return "", nil
}

// Of returns the page of apps, which are sorted by name.
func (p AppPage) Of(apps []App) []App {
	var out []App
	for _, a := range apps {
		if (p.After != "" && a.Name <= p.After) || (p.State != "" && a.State != p.State) {
			continue
		}
		out = append(out, a)
		if p.Limit > 0 && len(out) == p.Limit {
			break
		}
	}
	return out
}
