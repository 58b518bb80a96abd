package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// TestCrunDetection checks the answer for crun on this host: on a hybrid
// cgroup host crun refuses, and New says so plainly; elsewhere it runs.
func TestCrunDetection(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	opts := Options{Root: filepath.Join(dir, "c"), RuntimeRoot: filepath.Join(dir, "crun"), Runtime: "crun", CgroupParent: testCgroupParent}
	r, err := New(context.Background(), opts)
	if CgroupMode() == "hybrid" {
		if err == nil {
			t.Fatal("crun accepted on a hybrid cgroup host")
		}
		msg := err.Error()
		for _, want := range []string{"crun", "hybrid", "use runc", "crun said", "not supported"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not mention %q", msg, want)
			}
		}
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("error %v is not ErrUnavailable", err)
		}
		opts.Runtime = "auto"
		r, err = New(context.Background(), opts)
		if err != nil || r.Name() != "runc" {
			t.Fatalf("auto: %v, %v", r, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("crun on a %s host: %v", CgroupMode(), err)
	}
	if r.Name() != "crun" {
		t.Fatalf("name %q", r.Name())
	}
	st, out, _ := capture(t, r, baseSpec(t, "echo", "hi"))
	if out != "hi\n" || st.Code != 0 {
		t.Fatalf("crun echo: %+v %q", st, out)
	}
}

func TestRuntimeOptions(t *testing.T) {
	if _, err := New(context.Background(), Options{Root: "rel"}); errdefs.Field(err) != "root" {
		t.Fatalf("relative root: %v", err)
	}
	if _, err := New(context.Background(), Options{Root: t.TempDir(), Runtime: "kata"}); errdefs.Field(err) != "runtime" {
		t.Fatalf("unknown runtime: %v", err)
	}
	switch CgroupMode() {
	case "v1", "v2", "hybrid":
	default:
		t.Fatalf("cgroup mode %q", CgroupMode())
	}
}
