package cli

import (
	"errors"
	"slices"
	"testing"
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
