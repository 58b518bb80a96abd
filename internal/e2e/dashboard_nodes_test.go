package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/store/storetest"
)

// A daemon on a real single-member etcd is a node of a cluster: its
// dashboard, opened in a real browser, lists the node as the API does
// (ready, the leader, its address and CPUs), and when the node is drained
// the page shows it draining through its live stream, without a reload.
func TestDashboardListsClusterNode(t *testing.T) {
	ep := storetest.StartEtcd(t)
	const name, advertise = "dash-node", "127.0.0.1:7979"
	d := startDaemon(t, "--ui", "127.0.0.1:0", "--store", "etcd://"+strings.TrimPrefix(ep, "http://"),
		"--node-name", name, "--advertise", advertise)
	var nodes []types.Node
	waitFor(t, "the node to lead in shoal node ls", func() bool {
		nodes = nil
		json.Unmarshal([]byte(d.must("node", "ls", "--output", "json")), &nodes)
		return len(nodes) == 1 && nodes[0].Leader
	})
	n := nodes[0]
	if n.Name != name || n.State != "ready" || n.Addr != advertise {
		t.Fatalf("shoal node ls: %+v", n)
	}
	tok, err := os.ReadFile(filepath.Join(d.dataDir, "api-token"))
	if err != nil {
		t.Fatal(err)
	}
	b := openBrowser(t)
	b.do("open the dashboard with the token", chromedp.Navigate(d.uiURL()+"?token="+strings.TrimSpace(string(tok))))
	b.waitFor("the live stream connected", `document.querySelector("#live.on") !== null`)
	row := `document.querySelector('#nodes tr[data-node="` + name + `"]')`
	b.waitFor("the node, ready and leader", row+` !== null && `+row+`.dataset.state === "ready" && `+row+`.innerText.includes("leader")`)
	cells := strings.Split(b.eval(`Array.from(`+row+`.cells).map(c => c.innerText.trim()).join("|")`), "|")
	if len(cells) < 5 || cells[2] != advertise || cells[3] != strconv.Itoa(n.CPUs) || !strings.HasSuffix(cells[4], "GiB") {
		t.Fatalf("the page's row of the node: %q, want address %s and %d CPUs as shoal node ls says", cells, advertise, n.CPUs)
	}
	if rows := b.eval(`String(document.querySelectorAll("#nodes tr[data-node]").length)`); rows != "1" {
		t.Fatalf("the page lists %s nodes, want 1", rows)
	}
	b.eval(`window.shoalMark = "same page"`)

	d.must("node", "drain", name)
	b.waitFor("the node draining", row+`.dataset.state === "draining"`)
	b.screenshot("dashboard-nodes.png")
	if mark := b.eval(`String(window.shoalMark)`); mark != "same page" {
		t.Fatalf("the page was reloaded (mark %q)", mark)
	}
}
