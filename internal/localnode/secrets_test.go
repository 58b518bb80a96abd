package localnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// mapSecrets is a secret store in memory: "app/name" → value.
type mapSecrets map[string]string

func (m mapSecrets) Open(_ context.Context, app string, names []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, n := range names {
		v, ok := m[app+"/"+n]
		if !ok {
			return nil, errors.New("not set")
		}
		out[n] = []byte(v)
	}
	return out, nil
}

// A value set again reaches the files of the app's replicas here, whole,
// with their mode; other apps' replicas, the token and a secret no
// longer in the store are left as they are.
func TestRefreshSecrets(t *testing.T) {
	root := t.TempDir()
	write := func(id, name, v string, mode os.FileMode) string {
		p := filepath.Join(root, id, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	web := write("web-0123abcd", "db", "old", 0o440)
	tok := write("web-0123abcd", "SHOAL_TOKEN", "tok", 0o400)
	gone := write("web-0123abcd", "gone", "kept", 0o400)
	other := write("web-x-0123abcd", "db", "old", 0o400)
	n := &Node{secretsRoot: root, secrets: mapSecrets{"web/db": "new", "web/SHOAL_TOKEN": "no", "web-x/db": "other"}}
	if err := n.RefreshSecrets(context.Background(), "web", "db"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{web: "new", tok: "tok", gone: "kept", other: "old"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	if st, err := os.Stat(web); err != nil || st.Mode().Perm() != 0o440 {
		t.Errorf("the replaced file: %v, %v; want mode 0440", st, err)
	}
	if err := n.RefreshSecrets(context.Background(), "", ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(other); string(b) != "other" {
		t.Errorf("every app refreshed: web-x's db is %q", b)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "*", ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
