package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// ACME's flags are checked before anything starts, each error naming its
// flag; ACME is off without --acme-ca.
func TestACMEConfigValidate(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "root.txt")
	os.WriteFile(notPEM, []byte("nothing"), 0o644)
	for _, c := range []struct {
		cfg      ACMEConfig
		proxyOff bool
		field    string
	}{
		{ACMEConfig{}, false, ""},
		{ACMEConfig{CA: "https://ca.test/dir"}, false, ""},
		{ACMEConfig{Email: "ops@example.test"}, false, "--acme-email"},
		{ACMEConfig{OnDemandAllow: []string{"a.test"}}, false, "--acme-on-demand-allow"},
		{ACMEConfig{CA: "http://ca.test/dir"}, false, "--acme-ca"},
		{ACMEConfig{CA: "https://ca.test/dir"}, true, "--acme-ca"},
		{ACMEConfig{CA: "https://ca.test/dir", Challenges: []string{"dns-01"}}, false, "--acme-challenges"},
		{ACMEConfig{CA: "https://ca.test/dir", CARoot: filepath.Join(dir, "missing.pem")}, false, "--acme-ca-root"},
		{ACMEConfig{CA: "https://ca.test/dir", CARoot: notPEM}, false, "--acme-ca-root"},
		{ACMEConfig{CA: "https://ca.test/dir", OnDemandAsk: "ftp://x"}, false, "--acme-on-demand-ask"},
	} {
		err := c.cfg.validate(c.proxyOff)
		if c.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.cfg, err)
			}
			continue
		}
		if !errdefs.IsInvalid(err) || errdefs.Field(err) != c.field {
			t.Errorf("%+v: %v, want invalid %s", c.cfg, err, c.field)
		}
	}
}
