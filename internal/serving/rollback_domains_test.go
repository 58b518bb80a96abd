package serving

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// deployTop deploys app hello with top as its top-level keys (before any
// table) and more after them.
func (h *harness) deployTop(top string, more ...string) {
	h.t.Helper()
	m := fmt.Sprintf("name = \"hello\"\nimage = \"hello:1\"\nport = %d\n%s\n[scale]\nmin = 2\n", h.port, top)
	for _, x := range more {
		m += x + "\n"
	}
	if _, err := h.m.Deploy(context.Background(), types.DeployRequest{Manifest: m}); err != nil {
		h.t.Fatalf("deploy: %v", err)
	}
}

// checkNoDomain fails unless the app's route and record have no domains
// and the [https] of the last deploy (redirect and HSTS off).
func (h *harness) checkNoDomain(when string) {
	h.t.Helper()
	rt := h.r.route("hello")
	if len(rt.Domains) != 0 || !rt.KeepHTTP || !rt.NoHSTS {
		h.t.Fatalf("route %s: domains %v keepHTTP %v noHSTS %v; want the app's current (none, off, off)", when, rt.Domains, rt.KeepHTTP, rt.NoHSTS)
	}
	ctl := h.m.app("hello")
	ctl.mu.Lock()
	cfg := ctl.rec.Config
	ctl.unlock()
	if len(cfg.Domains) != 0 || cfg.HTTPS.Redirect || cfg.HTTPS.HSTS {
		h.t.Fatalf("app config %s: domains %v https %+v", when, cfg.Domains, cfg.HTTPS)
	}
}

const withDomain = "domains = [\"d.example.test\"]"
const noHTTPS = "[https]\nredirect = false\nhsts = false"

// Going back to a revision deployed with a domain the app has since given
// away (another app may own it now) keeps the app's current domains and
// [https]: they are the app's routing state, not the revision's.
func TestRollbackKeepsCurrentDomains(t *testing.T) {
	t.Run("by request", func(t *testing.T) {
		h := newHarness(t)
		h.deployTop(withDomain, env("1"))
		h.wait("two ready", func() bool { return len(h.byRevision(1, StateReady)) == 2 })
		h.deployTop("", env("2"), noHTTPS)
		h.wait("revision 2 ready", func() bool { return len(h.byRevision(2, StateReady)) == 2 })
		h.checkNoDomain("after revision 2")
		a, err := h.m.Rollback(context.Background(), "hello", types.RollbackRequest{})
		if err != nil || a.Revision != 1 {
			t.Fatalf("rollback: revision %d, %v", a.Revision, err)
		}
		h.checkNoDomain("after the rollback")
	})
	t.Run("failed rollout", func(t *testing.T) {
		h := newHarness(t)
		h.deployTop(withDomain, env("1"))
		h.wait("two ready", func() bool { return len(h.byRevision(1, StateReady)) == 2 })
		h.deployTop("", env("2"), noHTTPS, "[health]\nhttp = \"/fail\"\nstart_timeout = \"1s\"")
		h.advanceUntil("the rollback", 200*time.Millisecond, func() bool {
			ro := h.app().Rollout
			return ro != nil && ro.State == types.RolloutRolledBack
		})
		if a := h.app(); a.Revision != 1 {
			t.Fatalf("after the rollback: revision %d", a.Revision)
		}
		h.checkNoDomain("after the rollback")
	})
}
