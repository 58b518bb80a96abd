package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/api/types"
)

func TestCommandArgs(t *testing.T) {
	for _, c := range []struct {
		in, want []string
	}{
		{[]string{"img"}, []string{}},
		{[]string{"img", "ls", "-l"}, []string{"ls", "-l"}},
		{[]string{"img", "--", "ls", "-l"}, []string{"ls", "-l"}},
		{[]string{"img", "--"}, []string{}},
		// Only the first "--" sets the command apart; later ones are its own.
		{[]string{"img", "--", "--", "x"}, []string{"--", "x"}},
		{[]string{"img", "echo", "--"}, []string{"echo", "--"}},
	} {
		if got := commandArgs(c.in); !slices.Equal(got, c.want) {
			t.Errorf("commandArgs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A job whose command is only "--" is a usage error, not a job that runs
// "--" and fails.
func TestJobBuildDash(t *testing.T) {
	cmd := newJobRunCmd(&globals{}, true)
	f := &jobFlags{}
	if _, err := f.build(cmd, []string{"img", "--"}); !errors.As(err, new(usageError)) {
		t.Fatalf("build(img --) = %v, want a usage error", err)
	}
	req, err := f.build(cmd, []string{"img", "--", "echo", "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(req.Steps[0].Args, []string{"echo", "hi"}) {
		t.Fatalf("args = %q, want [echo hi]", req.Steps[0].Args)
	}
}

// An unknown subcommand of a command group is a usage error (exit 2), not
// the group's help with exit 0.
func TestUnknownSubcommand(t *testing.T) {
	for _, args := range [][]string{{"app", "bogus"}, {"job", "bogus"}, {"image", "bogus"}, {"bogus"}} {
		var out, errOut bytes.Buffer
		if code := Main(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown command") {
			t.Errorf("shoal %q: exit %d, stderr %q; want 2 and an unknown command error", args, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{"app"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "Available Commands") {
		t.Errorf("shoal app: exit %d, stdout %q; want 0 and its help", code, out.String())
	}
}

// A --max-size of volume import that is not a size is a usage error
// (exit 2), made before anything is sent.
func TestVolumeImportMaxSize(t *testing.T) {
	for _, v := range []string{"lots", "0", "-5"} {
		var out, errOut bytes.Buffer
		if code := Main([]string{"volume", "import", "--max-size", v, "web:data", "-"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "--max-size") {
			t.Errorf("--max-size %s: exit %d, stderr %q; want 2 naming --max-size", v, code, errOut.String())
		}
	}
}

// `shoal secret set -f` of a file it cannot read (missing, or a folder) is
// a usage error (exit 2) saying "cannot read", as the other commands'
// files are; a value above the daemon's bound is refused before it is
// sent, at the same bound the daemon has.
func TestSecretSetFile(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, types.MaxSecretValue+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(dir, "missing"), dir, big} {
		var out, errOut bytes.Buffer
		code := Main([]string{"secret", "set", "web", "k", "-f", f}, &out, &errOut)
		want := "cannot read"
		if f == big {
			want = "larger than"
		}
		if code != 2 || !strings.Contains(errOut.String(), want) {
			t.Errorf("secret set -f %s: exit %d, stderr %q; want 2 and %q", f, code, errOut.String(), want)
		}
	}
}
