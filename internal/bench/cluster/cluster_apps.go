package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/bench/kit"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
)

// helloEverywhere builds the example app hello on the first node as
// hello:1 and imports the same image (same digest) into the others, so that
// any node can start it whether or not it could fetch it from a peer.
func (e *env) helloEverywhere(ctx context.Context, dir string) error {
	bin, err := e.o.ExampleBinary(ctx, "hello", dir)
	if err != nil {
		return err
	}
	src := filepath.Join(dir, "images", "hello")
	if err := kit.CopyFileMode(bin, filepath.Join(src, "hello"), 0o755); err != nil {
		return err
	}
	first := e.c.Nodes[0]
	if err := cli(ctx, first, "image", "build", src, "--tag", "hello:1", "--entrypoint", "/hello", "--port", "8080"); err != nil {
		return err
	}
	layout := filepath.Join(dir, "hello-oci")
	out, err := exec.CommandContext(ctx, "skopeo", "copy", "oci:"+filepath.Join(first.DataDir, "images")+":hello:1", "oci:"+layout+":hello:1").CombinedOutput()
	if err != nil {
		return fmt.Errorf("skopeo copy of hello:1 out of %s: %w: %s", first.Name, err, strings.TrimSpace(string(out)))
	}
	for _, nd := range e.c.Nodes[1:] {
		if err := cli(ctx, nd, "image", "import", layout, "--tag", "hello:1"); err != nil {
			return err
		}
	}
	return nil
}

// cli runs the shoal CLI on nd; a non-zero exit is an error.
func cli(ctx context.Context, nd *clustertest.Node, args ...string) error {
	r, err := nd.Shoal(ctx, args...)
	if err != nil {
		return err
	}
	if r.Code != 0 {
		return fmt.Errorf("shoal %s on %s: exit %d: %s", strings.Join(args, " "), nd.Name, r.Code, strings.TrimSpace(r.Stderr))
	}
	return nil
}

// leader returns the node that leads once every node is ready.
func (e *env) leader(ctx context.Context) (*clustertest.Node, error) {
	l, _, err := e.roles(ctx)
	return l, err
}

// deploy deploys app (manifest after its name) through the leader and
// returns at once.
func (e *env) deploy(ctx context.Context, dir, app, manifest string) error {
	l, err := e.leader(ctx)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "manifests", app+".toml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("name = %q\n", app)+manifest), 0o644); err != nil {
		return err
	}
	return cli(ctx, l, "app", "deploy", "-f", path, "--detach")
}

// remove removes app through the leader.
func (e *env) remove(ctx context.Context, app string) error {
	l, err := e.leader(ctx)
	if err != nil {
		return err
	}
	return cli(ctx, l, "app", "rm", app)
}

// waitApp polls app's status on the leader every 50 ms until ok holds, for
// at most limit.
func (e *env) waitApp(ctx context.Context, app string, limit time.Duration, what string, ok func(types.App) bool) (types.App, error) {
	deadline := time.Now().Add(limit)
	var a types.App
	var err error
	for {
		var l *clustertest.Node
		if l, err = e.leader(ctx); err == nil {
			if err = l.GetJSON(ctx, "/v1/apps/"+app, &a); err == nil && ok(a) {
				return a, nil
			}
		}
		if time.Now().After(deadline) {
			return a, fmt.Errorf("app %q: not %s after %s (replicas %+v): %v", app, what, limit, a.Replicas, err)
		}
		select {
		case <-ctx.Done():
			return a, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readyOn returns app's ready replicas by node.
func readyOn(a types.App) map[string][]types.Replica {
	out := map[string][]types.Replica{}
	for _, r := range a.Replicas {
		if r.State == "ready" {
			out[r.Node] = append(out[r.Node], r)
		}
	}
	return out
}
