package store_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/store"
)

func TestKeysSortNumerically(t *testing.T) {
	var ks []string
	for _, n := range []int{10, 9, 100, 1} {
		ks = append(ks, store.RevisionKey("web", n))
	}
	sort.Strings(ks)
	for i, want := range []int64{1, 9, 10, 100} {
		got, err := store.ParseSeq(ks[i])
		if err != nil || got != want {
			t.Fatalf("key %d after sorting: %q parses to %d, %v; want %d", i, ks[i], got, err, want)
		}
	}
}

func TestKeysStayUnderTheirPrefix(t *testing.T) {
	cases := []struct{ key, prefix string }{
		{store.ContainerKey("n1", "c1"), store.NodeContainersPrefix("n1")},
		{store.NodeContainersPrefix("n1"), store.ContainersPrefix},
		{store.AppKey("web"), store.AppsPrefix},
		{store.RevisionKey("web", 3), store.RevisionsPrefix("web")},
		{store.ReplicaKey("web", "r1"), store.ReplicasPrefix("web")},
		{store.JobKey("j1"), store.JobsPrefix},
		{store.NodeKey("n1"), store.NodesPrefix},
		{store.EventKey(7), store.EventsPrefix},
		{store.RouteKey("web"), store.RoutesPrefix},
		{store.SecretKey("web", "db_password"), store.SecretsPrefix("web")},
		{store.SecretsPrefix("web"), store.SecretsRoot},
		{store.CertKey("*.example.test"), store.CertsPrefix},
		{store.DomainKey("www.example.test"), store.DomainsPrefix},
		{store.ACMEOrderKey("www.example.test"), store.ACMEOrdersPrefix},
		{store.ACMEChallengeKey("tok"), store.ACMEChallengesPrefix},
		{store.ACMEWantedKey("www.example.test"), store.ACMEWantedPrefix},
		{store.ACMEOrdersPrefix, store.ACMEPrefix},
	}
	for _, c := range cases {
		if !strings.HasPrefix(c.key, c.prefix) || !strings.HasPrefix(c.key, store.Root) {
			t.Errorf("key %q is not under %q and %q", c.key, c.prefix, store.Root)
		}
	}
	// One app's prefix does not cover another whose name extends it.
	if strings.HasPrefix(store.ReplicaKey("web2", "r1"), store.ReplicasPrefix("web")) {
		t.Error("replicas of web2 fall under the prefix of web")
	}
	if _, err := store.ParseSeq(store.AppKey("web")); err == nil {
		t.Error("ParseSeq accepted a key without a number")
	}
}
