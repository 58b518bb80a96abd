package runtime

import "testing"

func TestSmokeEcho(t *testing.T) {
	r := newTestRuntime(t, nil)
	st, out, errOut := capture(t, r, baseSpec(t, "echo", "hi"))
	t.Logf("st=%+v out=%q err=%q", st, out, errOut)
}
