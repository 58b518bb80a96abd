package manifest

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestArgv(t *testing.T) {
	ep, cmd := []string{"/docker-entrypoint.sh"}, []string{"nginx", "-g", "daemon off;"}
	cases := []struct {
		name          string
		command, args []string
		ep, cmd, want []string
	}{
		{"image only", nil, nil, ep, cmd, []string{"/docker-entrypoint.sh", "nginx", "-g", "daemon off;"}},
		{"command replaces the entrypoint and drops cmd", []string{"/bin/sh", "-c", "exec nginx"}, nil, ep, cmd, []string{"/bin/sh", "-c", "exec nginx"}},
		{"args replace cmd", nil, []string{"nginx", "-T"}, ep, cmd, []string{"/docker-entrypoint.sh", "nginx", "-T"}},
		{"command and args", []string{"/usr/sbin/nginx"}, []string{"-g", "daemon off;"}, ep, cmd, []string{"/usr/sbin/nginx", "-g", "daemon off;"}},
		{"no entrypoint", []string{"/hello"}, nil, nil, []string{"/bin/true"}, []string{"/hello"}},
		{"args without entrypoint", nil, []string{"/hello", "-v"}, nil, []string{"/bin/true"}, []string{"/hello", "-v"}},
	}
	for _, c := range cases {
		cfg := Config{Command: c.command, Args: c.args}
		if got := cfg.Argv(c.ep, c.cmd); !slices.Equal(got, c.want) {
			t.Errorf("%s: argv %q, want %q", c.name, got, c.want)
		}
	}
}

func TestEntrypointWarning(t *testing.T) {
	ep := []string{"/entrypoint.sh"}
	for _, c := range []struct {
		command []string
		ep      []string
		warn    bool
	}{
		{[]string{"/bin/sh", "-c", "x"}, ep, true},
		{[]string{"bash", "-c", "x"}, ep, true},
		{[]string{"/usr/bin/python3", "app.py"}, ep, true},
		{[]string{"/bin/sh", "-c", "x"}, nil, false},
		{[]string{"/usr/sbin/nginx"}, ep, false},
		{nil, ep, false},
	} {
		w := Config{Command: c.command}.EntrypointWarning(c.ep)
		if (w != "") != c.warn || (c.warn && !strings.Contains(w, "args")) {
			t.Errorf("command %q, entrypoint %q: warning %q", c.command, c.ep, w)
		}
	}
}

func TestParseStopKeys(t *testing.T) {
	base := "name = \"web\"\nimage = \"web:1\"\n"
	for _, c := range []struct {
		doc  string
		sig  syscall.Signal
		wait time.Duration
	}{
		{"", syscall.SIGTERM, DefaultStopTimeout},
		{"stop_signal = \"SIGQUIT\"\n", syscall.SIGQUIT, DefaultStopTimeout},
		{"stop_signal = \"quit\"\nstop_timeout = \"3s\"\n", syscall.SIGQUIT, 3 * time.Second},
		{"stop_signal = \"28\"\n", syscall.SIGWINCH, DefaultStopTimeout},
		{"stop_timeout = \"0s\"\n", syscall.SIGTERM, DefaultStopTimeout},
	} {
		cfg, err := Parse([]byte(base+c.doc), "shoal.toml")
		if err != nil {
			t.Fatalf("%q: %v", c.doc, err)
		}
		if sig := cfg.Signal(""); sig != c.sig {
			t.Errorf("%q: signal %v, want %v", c.doc, sig, c.sig)
		}
		if g := cfg.StopGrace(); g != c.wait {
			t.Errorf("%q: grace %v, want %v", c.doc, g, c.wait)
		}
	}
	// The image's StopSignal applies when the manifest names none.
	if sig := (Config{}).Signal("SIGWINCH"); sig != syscall.SIGWINCH {
		t.Errorf("image's StopSignal: %v", sig)
	}
	if sig := (Config{StopSignal: "SIGINT"}).Signal("SIGWINCH"); sig != syscall.SIGINT {
		t.Errorf("stop_signal over the image's: %v", sig)
	}
	if sig := (Config{}).Signal("NOPE"); sig != syscall.SIGTERM {
		t.Errorf("a bad image StopSignal: %v", sig)
	}
	// A spelled-out default keeps the hash.
	a, _ := Parse([]byte(base), "")
	b, _ := Parse([]byte(base+"stop_timeout = \"10s\"\n"), "")
	if a.Hash() != b.Hash() {
		t.Error("stop_timeout = \"10s\" changed the hash")
	}
	for _, c := range []struct{ doc, field, msg string }{
		{"stop_signal = \"SIGNOPE\"\n", "stop_signal", "not a signal name"},
		{"stop_signal = \"0\"\n", "stop_signal", "not a signal number"},
		{"stop_signal = \"99\"\n", "stop_signal", "not a signal number"},
		{"stop_signal = \"KILL\"\n", "stop_signal", "cannot be caught"},
		{"stop_timeout = \"-1s\"\n", "stop_timeout", "negative"},
		{"stop_timeout = \"1h\"\n", "stop_timeout", "more than"},
		{"args = [\"a\\u0000b\"]\n", "args[0]", "NUL"},
	} {
		_, err := Parse([]byte(base+c.doc), "shoal.toml")
		if !errors.Is(err, errdefs.ErrInvalid) || errdefs.Field(err) != c.field || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: error %v (field %q), want field %q and %q", c.doc, err, errdefs.Field(err), c.field, c.msg)
		}
	}
}
