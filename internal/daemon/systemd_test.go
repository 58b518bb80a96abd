package daemon

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unitFile is the systemd unit shipped with the repository.
const unitFile = "../../contrib/systemd/shoal.service"

// TestSystemdUnit checks that the shipped unit leaves the proxy process
// alone when the daemon stops or restarts (KillMode=process), restarts the
// daemon, and starts it with the daemon command; systemd-analyze verifies
// it.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	svc := unitSection(t, b, "Service")
	for key, want := range map[string]string{"KillMode": "process", "Restart": "always"} {
		if svc[key] != want {
			t.Errorf("%s: [Service] %s=%q; want %q", unitFile, key, svc[key], want)
		}
	}
	exe := strings.Fields(svc["ExecStart"])
	if len(exe) < 2 || !filepath.IsAbs(exe[0]) || filepath.Base(exe[0]) != "shoal" || exe[1] != "daemon" {
		t.Errorf("%s: ExecStart=%q; want /PATH/shoal daemon ...", unitFile, svc["ExecStart"])
	}
	if unitSection(t, b, "Install")["WantedBy"] == "" {
		t.Errorf("%s: [Install] has no WantedBy", unitFile)
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze (Debian package systemd, which scripts/install-deps.sh test installs) is needed to verify the unit: %v", err)
	}
	// verify wants ExecStart to be executable: point it at this test's
	// own binary.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "shoal.service")
	if err := os.WriteFile(unit, bytes.Replace(b, []byte(exe[0]), []byte(self), -1), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
}

// unitSection returns the key=value lines of one [section] of a unit file.
func unitSection(t *testing.T, b []byte, name string) map[string]string {
	t.Helper()
	kv := map[string]string{}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			in = line == "["+name+"]"
		case in:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: [%s] line %q is not KEY=VALUE", unitFile, name, line)
			}
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if len(kv) == 0 {
		t.Fatalf("%s: no [%s] section", unitFile, name)
	}
	return kv
}
