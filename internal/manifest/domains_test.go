package manifest

import (
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestDomains(t *testing.T) {
	base := "name = \"web\"\nimage = \"web:1\"\n"
	c, err := Parse([]byte(base+"domains = [\"www.example.test\", \"example.test\"]\n"), "shoal.toml")
	if err != nil || len(c.Domains) != 2 || !c.HTTPS.Redirect || !c.HTTPS.HSTS {
		t.Fatalf("parsed %+v, %v", c, err)
	}
	plain, _ := Parse([]byte(base), "shoal.toml")
	if c.Hash() != plain.Hash() {
		t.Error("domains changed the hash: they change the route, not the replicas")
	}
	off, err := Parse([]byte(base+"[https]\nredirect = false\nhsts = false\n"), "shoal.toml")
	if err != nil || off.HTTPS.Redirect || off.HTTPS.HSTS {
		t.Fatalf("[https] off: %+v, %v", off.HTTPS, err)
	}
	for _, bad := range []struct{ domains, field, mention string }{
		{`["www.example.test", "www.example.test"]`, "domains[1]", "twice"},
		{`["web.localhost"]`, "domains[0]", ".localhost"},
		{`["localhost"]`, "domains[0]", "not a domain"},
		{`["Www.example.test"]`, "domains[0]", "not a domain"},
		{`["*.example.test"]`, "domains[0]", "not a domain"},
		{`["-a.example.test"]`, "domains[0]", "not a domain"},
		{`["a..example.test"]`, "domains[0]", "not a domain"},
		{`["` + strings.Repeat("a", 64) + `.test"]`, "domains[0]", "not a domain"},
	} {
		_, err := Parse([]byte(base+"domains = "+bad.domains+"\n"), "shoal.toml")
		if !errdefs.IsInvalid(err) || !strings.Contains(err.Error(), bad.field) || !strings.Contains(err.Error(), bad.mention) {
			t.Errorf("domains = %s: %v; want %s mentioning %q", bad.domains, err, bad.field, bad.mention)
		}
	}
}
