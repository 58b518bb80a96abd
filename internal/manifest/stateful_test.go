package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

const statefulBase = "name = \"db\"\nimage = \"db:1\"\nport = 3306\n[volumes]\ndata = \"/var/lib/mysql\"\n"

func TestParseStateful(t *testing.T) {
	c, err := Parse([]byte(statefulBase+"[stateful]\nreplicas = 3\nready_command = [\"sh\", \"-c\", \"true\"]\nreseed = true\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Stateful
	if !s.Enabled() || s.Replicas != 3 || !s.Reseed || s.AllowZero || s.Freeze || len(s.ReadyCommand) != 3 {
		t.Fatalf("stateful %+v", s)
	}
	if c.Scale.Min != 3 || c.Scale.Max != 3 {
		t.Fatalf("scale bounds %d-%d, want the replicas 3-3", c.Scale.Min, c.Scale.Max)
	}
	// The count is no part of the hash; the table is.
	c5, err := Parse([]byte(statefulBase+"[stateful]\nreplicas = 5\nready_command = [\"sh\", \"-c\", \"true\"]\nreseed = true\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if c5.Hash() != c.Hash() {
		t.Fatal("a change of stateful.replicas alone changed the hash")
	}
	plain, err := Parse([]byte(statefulBase), "")
	if err != nil {
		t.Fatal(err)
	}
	if plain.Stateful.Enabled() || plain.Hash() == c.Hash() {
		t.Fatal("an app without [stateful] is stateful, or hashes as one")
	}
	pp, err := Parse([]byte(statefulBase+"[stateful]\nreplicas = 3\nready_command = [\"sh\", \"-c\", \"true\"]\nreseed = true\npeer_ports = [4567, 4568, 4444]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(pp.Stateful.PeerPorts) != 3 || pp.Stateful.PeerPorts[0] != 4567 || pp.Hash() == c.Hash() {
		t.Fatalf("peer_ports %v: parsed, and a part of the hash", pp.Stateful.PeerPorts)
	}
	if ReplicaName("db", 2) != "db-2" || OrdinalVolume("data", 0) != "data-0" {
		t.Fatal("names")
	}
	if n, i, ok := SplitOrdinalVolume("my-data-12"); !ok || n != "my-data" || i != 12 {
		t.Fatalf("split: %q %d %v", n, i, ok)
	}
	for _, bad := range []string{"data", "-1", "data-", "data-x"} {
		if _, _, ok := SplitOrdinalVolume(bad); ok {
			t.Fatalf("split %q: ok", bad)
		}
	}
}

func TestParseStatefulErrors(t *testing.T) {
	for _, tc := range []struct{ name, toml, field, says string }{
		{"no replicas", statefulBase + "[stateful]\nreseed = true\n", "stateful.replicas", "1-1000"},
		{"zero replicas", statefulBase + "[stateful]\nreplicas = 0\n", "stateful.replicas", "1-1000"},
		{"too many", statefulBase + "[stateful]\nreplicas = 1001\n", "stateful.replicas", "1-1000"},
		{"scale.min", statefulBase + "[scale]\nmin = 1\n[stateful]\nreplicas = 2\n", "scale.min", "stateful.replicas"},
		{"scale.max", statefulBase + "[scale]\nmax = 4\n[stateful]\nreplicas = 2\n", "scale.max", "stateful.replicas"},
		{"no volume", "name = \"db\"\nimage = \"db:1\"\n[stateful]\nreplicas = 2\n", "volumes", "own copy"},
		{"state merge", statefulBase + "[state]\ndir = \"/state\"\nmerge = \"append\"\n[stateful]\nreplicas = 2\n", "state.dir", "stateless"},
		{"ordinal-like volume", "name = \"db\"\nimage = \"db:1\"\n[volumes]\ndata-1 = \"/d\"\n[stateful]\nreplicas = 2\n", "volumes.data-1", "-<number>"},
		{"empty ready_command", statefulBase + "[stateful]\nreplicas = 2\nready_command = []\n", "stateful.ready_command", "program"},
		{"unknown key", statefulBase + "[stateful]\nreplicas = 2\nreplica = 3\n", "stateful.replica", "unknown"},
		{"wrong type", statefulBase + "[stateful]\nreplicas = \"3\"\n", "stateful.replicas", ""},
		{"peer port 0", statefulBase + "[stateful]\nreplicas = 2\npeer_ports = [4567, 0]\n", "stateful.peer_ports[1]", "1-65535"},
		{"peer port too high", statefulBase + "[stateful]\nreplicas = 2\npeer_ports = [65536]\n", "stateful.peer_ports[0]", "1-65535"},
		{"peer port twice", statefulBase + "[stateful]\nreplicas = 2\npeer_ports = [4567, 4568, 4567]\n", "stateful.peer_ports[2]", "twice"},
		{"too many peer ports", statefulBase + "[stateful]\nreplicas = 2\npeer_ports = [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]\n", "stateful.peer_ports", "at most 16"},
		{"peer ports not a list", statefulBase + "[stateful]\nreplicas = 2\npeer_ports = 4567\n", "stateful.peer_ports", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.toml), "")
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %v, want field %s saying %q", err, tc.field, tc.says)
			}
		})
	}
}
