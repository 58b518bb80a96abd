package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

// secretsApp copies what its replica sees of its secrets into /www and
// serves it: the files under /run/secrets, their owners and modes, its
// environment, and what a write to a secret's file answers.
const secretsApp = `
name = "sec"
image = "busybox:1"
command = ["sh", "-c", "mkdir -p /www; cat /run/secrets/db_password > /www/db; cat /run/secrets/SHOAL_TOKEN > /www/token; env > /www/env; ls -ln /run/secrets > /www/ls; (echo x >> /run/secrets/db_password) 2> /www/write; ln -s /run/secrets /www/s; exec httpd -f -p 8080 -h /www"]
[scale]
min = 1
max = 1
[secrets]
db_password = { uid = 33, mode = "0440" }
API_KEY = { env = true }
SHOAL_TOKEN = { env = false }
`

// TestAppSecrets: secrets set from standard input and from a file reach a
// replica as read-only files under /run/secrets with the owner and mode
// the manifest gives, in its environment only when it asks (env = true),
// the self API token a file too and, named without env, out of the
// environment; no value is on the command line, in the store's file, in
// `shoal secret ls`, the app's status, events or logs; a value set again
// reaches the running replica's file; a replica's secrets go with it; a
// deploy naming a secret nobody set is refused, and a secret removed later
// fails the replicas started after.
func TestAppSecrets(t *testing.T) {
	d := startDaemon(t)
	d.busybox("busybox:1")
	rnd := func() string {
		b := make([]byte, 12)
		rand.Read(b)
		return hex.EncodeToString(b)
	}
	dbValue, keyValue := "db-"+rnd(), "key-"+rnd()

	if r := d.shoal("secret", "set", "sec", "db_password", dbValue); r.code != 2 {
		t.Fatalf("a value on the command line: exit %d, want 2 (usage)\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := d.shoalIn([]byte(dbValue), "secret", "set", "sec", "db_password"); r.code != 0 {
		t.Fatalf("secret set from stdin: exit %d\n%s", r.code, r.stderr)
	}
	keyFile := filepath.Join(t.TempDir(), "api.key")
	if err := os.WriteFile(keyFile, []byte(keyValue), 0o600); err != nil {
		t.Fatal(err)
	}
	d.must("secret", "set", "sec", "API_KEY", "-f", keyFile)
	if r := d.shoalIn([]byte("x"), "secret", "set", "sec", "../etc"); r.code == 0 || !strings.Contains(r.stderr, "name") {
		t.Fatalf("a bad secret name: exit %d, %s", r.code, r.stderr)
	}

	d.deploy(secretsApp)
	a := d.waitApp("sec", "ready", func(a types.App) bool { return a.Ready == 1 })
	id := a.Replicas[0].ID
	proxy := d.proxyAddr()
	read := func(path string) string {
		t.Helper()
		code, body, _ := get(t, proxy, "sec", path)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		return body
	}
	if got := read("/db"); got != dbValue {
		t.Errorf("/run/secrets/db_password holds %q, want %q", got, dbValue)
	}
	if tok := read("/token"); !regexp.MustCompile(`^[A-Za-z0-9_-]{40,}$`).MatchString(tok) {
		t.Errorf("/run/secrets/SHOAL_TOKEN holds %q, want the replica's token", tok)
	}
	env := read("/env")
	if !strings.Contains(env, "API_KEY="+keyValue+"\n") {
		t.Errorf("the environment lacks API_KEY (env = true):\n%s", env)
	}
	if strings.Contains(env, dbValue) || strings.Contains(env, "SHOAL_TOKEN=") {
		t.Errorf("the environment holds db_password's value or SHOAL_TOKEN:\n%s", env)
	}
	ls := read("/ls")
	if !regexp.MustCompile(`(?m)^-r--r-----\s+1 33\s+0\s+\d+ .* db_password$`).MatchString(ls) ||
		!regexp.MustCompile(`(?m)^-r--------\s+1 0\s+0\s+\d+ .* API_KEY$`).MatchString(ls) {
		t.Errorf("/run/secrets: want db_password 0440 owned by 33:0, API_KEY 0400 by 0:0:\n%s", ls)
	}
	if w := read("/write"); !strings.Contains(w, "Read-only file system") {
		t.Errorf("a write to a secret's file: %q, want Read-only file system", w)
	}
	onHost := filepath.Join(d.runDir, "secrets", id)
	if _, err := os.Stat(onHost); err != nil {
		t.Fatalf("the replica's secrets on the host: %v", err)
	}

	// A value set while the replica runs replaces its file, with its
	// owner and mode.
	dbValue2 := "db2-" + rnd()
	if r := d.shoalIn([]byte(dbValue2), "secret", "set", "sec", "db_password"); r.code != 0 {
		t.Fatalf("secret set again: exit %d\n%s", r.code, r.stderr)
	}
	waitFor(t, "the running replica's file holds the new value", func() bool {
		code, body, _ := get(t, proxy, "sec", "/s/db_password")
		return code == 200 && body == dbValue2
	})
	if st, err := os.Stat(filepath.Join(onHost, "db_password")); err != nil || st.Mode().Perm() != 0o440 {
		t.Errorf("the replaced file: %v, %v; want mode 0440", st, err)
	}

	ls = d.must("secret", "ls", "sec")
	if !strings.Contains(ls, "API_KEY") || !strings.Contains(ls, "db_password") {
		t.Errorf("secret ls lacks a name:\n%s", ls)
	}
	shown := ls + d.must("secret", "ls", "sec", "-o", "json") + d.must("app", "status", "sec", "-o", "json") +
		d.must("app", "status", "sec") + d.must("events", "--app", "sec") + d.must("app", "logs", "sec") + d.log.String()
	raw, err := os.ReadFile(filepath.Join(d.dataDir, "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{dbValue, dbValue2, keyValue} {
		if strings.Contains(shown, v) {
			t.Errorf("a secret's value is shown by the CLI or the daemon's log")
		}
		if strings.Contains(string(raw), v) {
			t.Errorf("the store's file holds a secret's value")
		}
	}

	// A secret named but never set: the app fails, saying how to set it.
	f := filepath.Join(t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(`
name = "nosec"
image = "busybox:1"
command = ["httpd", "-f", "-p", "8080"]
[scale]
min = 1
max = 1
[secrets]
missing = {}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := d.shoal("app", "deploy", "-f", f); r.code == 0 || !strings.Contains(r.stderr, "secrets.missing") ||
		!strings.Contains(r.stderr, "shoal secret set nosec missing") {
		t.Errorf("an app whose secret is not set: deploy exit %d, %s", r.code, r.stderr)
	}
	if r := d.shoal("app", "status", "nosec"); r.code == 0 {
		t.Errorf("an app whose secret is not set was deployed:\n%s", r.stdout)
	}
	// One removed after the deploy fails the replicas started after.
	d.must("secret", "rm", "sec", "API_KEY")
	d.must("app", "scale", "sec", "--min", "2", "--max", "2")
	d.waitApp("sec", "failing for its removed secret", func(a types.App) bool {
		return strings.Contains(a.Error, "shoal secret set sec API_KEY")
	})

	d.must("app", "rm", "sec")
	waitFor(t, "the replica's secrets removed with it", func() bool {
		_, err := os.Stat(onHost)
		return os.IsNotExist(err)
	})
	if r := d.shoal("secret", "ls", "sec", "-o", "json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("the app's secrets after app rm: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
}
