package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/acme/pebbletest"
	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/cluster/clustertest"
	"github.com/shoal-run/shoal/internal/store"
)

// clusterTLSPort is each cluster node's --proxy-tls port, in its own
// network namespace.
const clusterTLSPort = "8443"

// addNodes starts n more nodes with the cluster's flags as they are now.
func (c *testCluster) addNodes(n int) {
	c.t.Helper()
	for range n {
		nd, err := c.AddNode(context.Background())
		if err != nil {
			c.t.Fatal(err)
		}
		c.nodes = append(c.nodes, &clusterNode{Node: nd, c: c, name: nd.Name, ip: nd.IP, veth: nd.Veth,
			dataDir: nd.DataDir, runDir: nd.RunDir, cgroup: nd.Cgroup})
	}
}

// TestClusterEdgeACME: in a cluster of three nodes, each with its proxy's
// HTTPS listener and ACME from Pebble (the CA on the bridge, validating
// through a loopback port forwarded to one node's proxy), an app's own
// domain gets one certificate, ordered once; curl, trusting Pebble's root
// alone, reaches the app over HTTPS through every node's proxy; in etcd
// the certificate's and the ACME account's keys are sealed (no PEM key).
// Then, Pebble's certificates living 90 s, the renewal at two thirds of
// its life is started by the leader, which is killed while the CA holds
// the validation: another node finishes the renewal, and every node's
// proxy, the killed one's restarted too, serves the new certificate.
func TestClusterEdgeACME(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl (Debian's curl; scripts/install-deps.sh test): %v", err)
	}
	plainFw, tlsFw := newForwarder(t), newForwarder(t)
	// Certificates' keys are sealed with a key kept off etcd: the
	// cluster secret of --cluster-token-file, the same on every node.
	token := filepath.Join(t.TempDir(), "cluster.token")
	if err := os.WriteFile(token, []byte("e2e-cluster-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startClusterWith(t, 0, true, "--cluster-token-file", token)
	peb := pebbletest.Start(t, pebbletest.Options{HTTPPort: plainFw.port(), TLSPort: tlsFw.port(),
		Validity: 90 * time.Second, APIIP: c.HostIP})
	c.Opts.Args = append(c.Opts.Args, "--proxy-tls", "0.0.0.0:"+clusterTLSPort,
		"--acme-ca", peb.Directory, "--acme-ca-root", peb.APIRoot, "--acme-email", "ops@shoal.test")
	c.addNodes(3)
	lead := c.leaderNode()
	// Pebble validates through a follower's proxy: each node's proxy
	// answers every challenge, not only the orderer's.
	var via *clusterNode
	for _, nd := range c.nodes {
		if nd != lead {
			via = nd
			break
		}
	}
	target := func(nd *clusterNode) {
		plain, tls := nd.Proxy(), net.JoinHostPort(nd.ip, clusterTLSPort)
		plainFw.target.Store(&plain)
		tlsFw.target.Store(&tls)
	}
	target(via)

	c.helloEverywhere()
	const domain = "www.cluster.shoal.test"
	lead.deployApp("hello", "image = \"hello:1\"\nport = 8080\ndomains = [\""+domain+"\"]\n"+
		"[scale]\nmin = 1\nmax = 1\n[health]\nhttp = \"/healthz\"\n")
	lead.appOn("hello ready", "hello", func(a types.App) bool { return readyCount(a) == 1 })

	certOn := func(nd *clusterNode) (types.Cert, bool) {
		var list []types.Cert
		if err := nd.GetJSON(context.Background(), "/v1/certs", &list); err != nil {
			return types.Cert{}, false
		}
		for _, c := range list {
			if len(c.Domains) > 0 && c.Domains[0] == domain {
				return c, true
			}
		}
		return types.Cert{}, false
	}
	var first types.Cert
	waitForLong(t, "the certificate of "+domain+" from Pebble", func() bool {
		var ok bool
		first, ok = certOn(lead)
		return ok && !first.Pending
	})
	// From now on the CA's validations are held until the test lets
	// them go: the renewal cannot finish on the node that starts it.
	release := plainFw.hold()
	t.Cleanup(release)
	st := c.etcdStore()
	defer st.Close()
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	challenges, err := st.Watch(wctx, store.ACMEChallengesPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if first.Source != "acme" || !strings.Contains(first.Issuer, "Pebble") || first.LastError != "" {
		t.Fatalf("cert ls: %+v", first)
	}

	// At rest in etcd: the certificate's key and the account's are sealed.
	for _, k := range []string{store.CertKey(domain), store.ACMEAccountKey} {
		kv, err := st.Get(context.Background(), k)
		if err != nil {
			t.Fatalf("%s in etcd: %v", k, err)
		}
		if bytes.Contains(kv.Value, []byte("PRIVATE KEY")) || bytes.Contains(kv.Value, []byte("-----BEGIN EC")) {
			t.Fatalf("%s in etcd holds a PEM key:\n%s", k, kv.Value)
		}
	}

	pool, rootPEM, err := peb.IssuingRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rootFile := filepath.Join(t.TempDir(), "pebble-root.pem")
	if err := os.WriteFile(rootFile, rootPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	roots := &tls.Config{RootCAs: pool}
	// curlVia GETs https://domain/ through nd's proxy, trusting Pebble's
	// root alone.
	curlVia := func(nd *clusterNode) (string, error) {
		out, err := exec.Command(curl, "-sS", "--max-time", "30", "--cacert", rootFile,
			"--resolve", domain+":"+clusterTLSPort+":"+nd.ip, "-w", "\n%{http_code}",
			"https://"+domain+":"+clusterTLSPort+"/").CombinedOutput()
		return string(out), err
	}
	firstSerial := ""
	for _, nd := range c.nodes {
		var out string
		var err error
		waitFor(t, "curl https://"+domain+"/ through "+nd.name, func() bool {
			out, err = curlVia(nd)
			return err == nil && strings.HasSuffix(out, "\n200")
		})
		if !strings.HasPrefix(out, "hello from ") {
			t.Fatalf("curl https://%s/ through %s: %q", domain, nd.name, out)
		}
		s := servedSerial(net.JoinHostPort(nd.ip, clusterTLSPort), domain, roots)
		if firstSerial == "" {
			firstSerial = s
		}
		if s == "" || s != firstSerial {
			t.Fatalf("%s's proxy serves certificate %q, another node's %q", nd.name, s, firstSerial)
		}
	}
	if evs := lead.shoal("events", "--app", "hello").stdout; strings.Count(evs, "certificate for "+domain+" issued") != 1 {
		t.Fatalf("the certificate was not ordered once:\n%s", evs)
	}

	// The renewal: the leader puts its challenge; it is killed while the
	// CA's validation is held, then the validations go through again.
	var orderer *clusterNode
	deadline := time.After(3 * time.Minute)
	for orderer == nil {
		select {
		case ev, ok := <-challenges:
			if !ok {
				t.Fatal("the watch of the challenges ended")
			}
			if ev.Type != store.EventPut {
				continue
			}
			ns, err := c.nodes[0].nodes()
			if err != nil {
				t.Fatal(err)
			}
			orderer = c.nodeNamed(clustertest.Leader(ns))
			if orderer == nil {
				t.Fatalf("a challenge of the renewal, but no one leader: %+v", ns)
			}
		case <-deadline:
			t.Fatalf("no renewal started within 3 minutes of the certificate (%+v)", first)
		}
	}
	orderer.kill()
	t.Logf("renewal started by %s, killed", orderer.name)
	for _, nd := range c.nodes {
		if nd != orderer {
			target(nd)
			break
		}
	}
	release()

	var second types.Cert
	var survivor *clusterNode
	for _, nd := range c.nodes {
		if nd != orderer {
			survivor = nd
			break
		}
	}
	waitForLong(t, "the renewal finished by another node", func() bool {
		var ok bool
		second, ok = certOn(survivor)
		return ok && !second.Pending && second.NotAfter.After(first.NotAfter)
	})
	if second.Source != "acme" || second.LastError != "" || !second.RenewedAt.After(first.RenewedAt) {
		t.Fatalf("cert ls after the renewal: %+v (before: %+v)", second, first)
	}
	orderer.start()
	for _, nd := range c.nodes {
		addr := net.JoinHostPort(nd.ip, clusterTLSPort)
		waitFor(t, "the renewed certificate served by "+nd.name, func() bool {
			s := servedSerial(addr, domain, roots)
			return s != "" && s != firstSerial
		})
		if out, err := curlVia(nd); err != nil || !strings.HasSuffix(out, "\n200") {
			t.Fatalf("curl https://%s/ through %s after the renewal: %q, %v", domain, nd.name, out, err)
		}
	}
	if evs := survivor.shoal("events", "--app", "hello").stdout; strings.Count(evs, "certificate for "+domain+" issued") != 2 {
		t.Fatalf("events after the renewal:\n%s", evs)
	}
}

// readyCount counts an app's ready replicas.
func readyCount(a types.App) int {
	n := 0
	for _, r := range a.Replicas {
		if r.State == "ready" {
			n++
		}
	}
	return n
}
