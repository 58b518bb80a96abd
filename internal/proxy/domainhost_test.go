package proxy

import (
	"io"
	"log/slog"
	"testing"

	"github.com/shoal-run/shoal/internal/route"
)

// <app>.<--domain> is that app's even when another app lists the same
// name among its own domains: no app takes another's host.
func TestAppHostUnderDomainBeatsOtherAppsDomain(t *testing.T) {
	p := New(Options{Domain: "apps.test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { p.Close() })
	p.SetRoute(route.Route{App: "thief", Domains: []string{"victim.apps.test", "own.example.test"}})
	p.SetRoute(route.Route{App: "victim"})
	for host, want := range map[string]string{
		"victim.apps.test":      "victim",
		"VICTIM.apps.test.:80":  "victim",
		"own.example.test":      "thief",
		"thief.apps.test":       "thief",
		"victim.localhost:8080": "victim",
	} {
		if got := p.appName(host); got != want {
			t.Errorf("appName(%q) = %q, want %q", host, got, want)
		}
		got := ""
		if a := p.lookupHost([]byte(host)); a != nil {
			got = a.name
		}
		if got != want {
			t.Errorf("lookupHost(%q) = %q, want %q", host, got, want)
		}
	}
	// A name under --domain that no app has is still an app's own domain.
	p.RemoveRoute("victim")
	if got := p.appName("victim.apps.test"); got != "thief" {
		t.Errorf("appName(victim.apps.test) with no app victim = %q, want thief", got)
	}
}
