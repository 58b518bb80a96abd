package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// busyboxEverywhere builds a busybox image tagged tag on the first node
// and imports the same image (same digest) into the others.
func (c *testCluster) busyboxEverywhere(tag string) {
	t := c.t
	t.Helper()
	first := c.nodes[0]
	first.busybox(tag)
	layout := filepath.Join(t.TempDir(), "busybox")
	out, err := exec.Command("skopeo", "copy", "oci:"+filepath.Join(first.dataDir, "images")+":"+tag, "oci:"+layout+":"+tag).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy of %s out of %s: %v\n%s", tag, first.name, err, out)
	}
	for _, nd := range c.nodes[1:] {
		if r := nd.shoal("image", "import", layout, "--tag", tag); r.code != 0 {
			t.Fatalf("image import on %s: %s", nd.name, r.stderr)
		}
	}
}

// until runs the CLI on nd until it exits 0 (a leader just elected answers
// 503 until it has loaded the apps), for at most 30 s.
func (nd *clusterNode) until(what string, args ...string) result {
	t := nd.c.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := nd.shoal(args...)
		if r.code == 0 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: exit %d: %s%s", what, nd.name, r.code, r.stdout, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterAppSecretsLogsVolumes: an app with a secret and a volume runs
// a replica on each of two nodes. The replica on the follower sees the
// secret's value as /run/secrets/NAME (the nodes share the secrets key);
// `shoal app logs --follow` on the leader prints the new lines of the
// follower's replica; `shoal app rm --volumes` removes the app's volume
// on both nodes, not only on the leader.
func TestClusterAppSecretsLogsVolumes(t *testing.T) {
	key := filepath.Join(t.TempDir(), "secrets.key")
	b := make([]byte, 32)
	rand.Read(b)
	if err := os.WriteFile(key, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c := startClusterWith(t, 2, false, "--secrets-key-file", key)
	c.busyboxEverywhere("busybox:1")
	lead := c.leaderNode()
	other := c.nodes[0]
	if other == lead {
		other = c.nodes[1]
	}

	rand.Read(b[:12])
	value := "db-" + hex.EncodeToString(b[:12])
	valueFile := filepath.Join(t.TempDir(), "db_password")
	if err := os.WriteFile(valueFile, []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	lead.until("secret set", "secret", "set", "vols", "db_password", "-f", valueFile)
	manifest := `name = "vols"
image = "busybox:1"
port = 8080
command = ["sh", "-c", "cat /run/secrets/db_password > /data/secret-$SHOAL_REPLICA; httpd -f -p 8080 -h /data & i=0; while true; do i=$((i+1)); echo $SHOAL_REPLICA tick $i; usleep 100000; done"]
[scale]
min = 2
max = 2
[volumes]
data = "/data"
[secrets]
db_password = {}
`
	f := filepath.Join(t.TempDir(), "shoal.toml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	lead.until("deploy", "app", "deploy", "-f", f, "--detach")
	a := lead.waitApp("a ready replica on each node", "vols", func(a types.App) bool {
		by := readyByNode(a)
		return by[lead.name] == 1 && by[other.name] == 1
	})
	var remote string
	for _, r := range a.Replicas {
		if r.Node == other.name {
			remote = r.ID
		}
	}

	// The secret, on the follower.
	vol := func(nd *clusterNode) string { return filepath.Join(nd.dataDir, "apps", "vols", "volumes", "data") }
	copied := filepath.Join(vol(other), "secret-"+remote)
	waitFor(t, "the follower's replica's copy of its secret", func() bool {
		got, _ := os.ReadFile(copied)
		return string(got) == value
	})

	// Its new lines, followed from the leader.
	cmd := exec.Command(shoalBin, "app", "logs", "vols", "--follow", "--since", "0s")
	cmd.Env = append(os.Environ(), "SHOAL_HOST=unix://"+lead.Sock())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var followed lockedLines
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			followed.add(sc.Text())
		}
	}()
	waitFor(t, "new lines of "+remote+" on "+other.name+" followed from leader "+lead.name, func() bool {
		n := 0
		for _, l := range strings.Split(followed.text(), "\n") {
			if strings.HasPrefix(l, remote+" | "+remote+" tick ") {
				n++
			}
		}
		return n >= 3
	})

	// Its volume on both nodes, then on neither.
	for _, nd := range []*clusterNode{lead, other} {
		if _, err := os.Stat(vol(nd)); err != nil {
			t.Fatalf("volume data of app vols on %s: %v", nd.name, err)
		}
	}
	if r := lead.shoal("app", "rm", "vols", "--volumes"); r.code != 0 {
		t.Fatalf("app rm --volumes: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for _, nd := range []*clusterNode{lead, other} {
		if _, err := os.Stat(vol(nd)); !os.IsNotExist(err) {
			t.Errorf("volume data of app vols on %s after app rm --volumes: %v; want it gone", nd.name, err)
		}
		if r := nd.shoal("volume", "ls"); r.code != 0 || strings.Contains(r.stdout, "vols") {
			t.Errorf("volume ls on %s after app rm --volumes: exit %d: %s%s", nd.name, r.code, r.stdout, r.stderr)
		}
	}
}
