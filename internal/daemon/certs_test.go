package daemon

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/store"
)

// deployApps deploys by answering, or failing with fail.
type deployApps struct {
	api.Apps
	fail error
}

func (d *deployApps) Deploy(_ context.Context, req types.DeployRequest) (types.App, error) {
	return types.App{}, d.fail
}

func (d *deployApps) Remove(context.Context, string) error { return nil }

func TestDeployClaimsDomains(t *testing.T) {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	inner := &deployApps{}
	a := appsWithDomains{inner, st, ""}
	deploy := func(name string, domains ...string) error {
		m := "name = \"" + name + "\"\nimage = \"x:1\"\n"
		if len(domains) > 0 {
			m += "domains = [\"" + strings.Join(domains, "\", \"") + "\"]\n"
		}
		_, err := a.Deploy(ctx, types.DeployRequest{Manifest: m})
		return err
	}
	owner := func(d string) string {
		kv, err := st.Get(ctx, store.DomainKey(d))
		if err != nil {
			return ""
		}
		return string(kv.Value)
	}
	if err := deploy("web", "www.example.test", "example.test"); err != nil {
		t.Fatal(err)
	}
	err = deploy("shop", "shop.example.test", "example.test")
	if !errdefs.IsInvalid(err) || errdefs.Field(err) != "domains" || !strings.Contains(err.Error(), `app "web"`) {
		t.Fatalf("shop claiming web's domain: %v; want invalid domains naming web", err)
	}
	if owner("shop.example.test") != "" {
		t.Fatal("a refused deploy kept a domain")
	}
	// A deploy that fails gives back what it claimed.
	inner.fail = errors.New("no image")
	if err := deploy("shop", "shop.example.test"); err == nil || owner("shop.example.test") != "" {
		t.Fatalf("failed deploy: %v, owner %q", err, owner("shop.example.test"))
	}
	inner.fail = nil
	// A redeploy without a domain lets it go; removing the app, the rest.
	if err := deploy("web", "www.example.test"); err != nil || owner("example.test") != "" || owner("www.example.test") != "web" {
		t.Fatalf("redeploy: %v, example.test owned by %q", err, owner("example.test"))
	}
	if err := deploy("shop", "example.test"); err != nil || owner("example.test") != "shop" {
		t.Fatalf("shop after web let go: %v", err)
	}
	if err := a.Remove(ctx, "web"); err != nil || owner("www.example.test") != "" {
		t.Fatalf("remove: %v, www owned by %q", err, owner("www.example.test"))
	}
}

// A domain equal to or under the daemon's --domain is <app>.<domain>, an
// app's own host: no deploy may list it, nor claim it.
func TestDeployRefusesDaemonDomain(t *testing.T) {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	a := appsWithDomains{&deployApps{}, st, ".Apps.Example.test."}
	for _, d := range []string{"b.apps.example.test", "apps.example.test", "x.y.apps.example.test"} {
		m := "name = \"a\"\nimage = \"x:1\"\ndomains = [\"ok.example.test\", \"" + d + "\"]\n"
		_, err := a.Deploy(ctx, types.DeployRequest{Manifest: m})
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != "domains" || !strings.Contains(err.Error(), d) || !strings.Contains(err.Error(), "--domain") {
			t.Fatalf("deploy listing %s: %v; want invalid domains naming it and --domain", d, err)
		}
		if _, err := st.Get(ctx, store.DomainKey("ok.example.test")); err == nil {
			t.Fatalf("deploy listing %s claimed ok.example.test", d)
		}
	}
	// Near names are an app's to take.
	m := "name = \"a\"\nimage = \"x:1\"\ndomains = [\"xapps.example.test\", \"example.test\"]\n"
	if _, err := a.Deploy(ctx, types.DeployRequest{Manifest: m}); err != nil {
		t.Fatalf("deploy of names beside --domain: %v", err)
	}
}
