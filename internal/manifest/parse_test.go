package manifest

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// readmeExample is the shoal.toml of README.md's "shoal.toml, every key",
// so the reference users read stays true.
func readmeExample(t *testing.T) string {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### shoal.toml, every key")
	_, rest, ok1 := strings.Cut(rest, "```toml\n")
	doc, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok1 || !ok2 {
		t.Fatal("README.md has no toml block under \"### shoal.toml, every key\"")
	}
	return doc
}

func TestParseReadmeExample(t *testing.T) {
	c, err := Parse([]byte(readmeExample(t)), "shoal.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "hello" || c.Image != "hello:1" || c.Port != 8080 || c.Scale.Max != 10 ||
		c.Scale.MaxLifetime.Duration != time.Hour || c.Resources.MaxCPU != 2 ||
		c.Resources.MemoryBytes() != 256<<20 || c.Health.HTTP != "/healthz" || c.Health.TCP ||
		c.Volumes["data"] != "/data" || c.Env["GREETING"] != "hi" || !c.Secrets["API_KEY"].Env || c.TokenInEnv() || c.State.Volume != "data" || c.State.Merge != MergeAppend {
		t.Fatalf("parsed %+v", c)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte("name = \"web\"\nimage = \"web:1\"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Name: "web", Image: "web:1", Port: 8080, Init: true,
		Scale: Scale{Min: 0, Max: 10, TargetConcurrency: 10,
			IdleTimeout: Duration{30 * time.Second}, FreezeTimeout: Duration{10 * time.Minute},
			Queue: 100, QueueTimeout: Duration{30 * time.Second}, DrainTimeout: Duration{30 * time.Second},
			RollbackGrace: Duration{10 * time.Minute}},
		Resources: Resources{CPU: 0.5, MaxCPU: 0.5, Memory: "256Mi", Pids: 256, Disk: "1Gi", MaxBody: "10Mi"},
		Health: Health{TCP: true, Interval: Duration{time.Second}, Timeout: Duration{time.Second},
			Failures: 3, FailureThreshold: 3, SuccessThreshold: 1, StartTimeout: Duration{time.Minute}},
	}
	if c.Hash() != want.Hash() || !reflect.DeepEqual(c.Health, want.Health) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if c.Resources.MaxBodyBytes() != 10<<20 {
		t.Fatalf("max body %d", c.Resources.MaxBodyBytes())
	}
	// Explicit zeros are kept, not replaced by defaults.
	c, err = Parse([]byte(`name = "web"
image = "web:1"
[scale]
min = 3
idle_timeout = "0s"
queue = 0
[resources]
cpu = 0
memory = "0"
pids = 0
`), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Scale.Max != 10 || c.Scale.IdleTimeout.Duration != 0 || c.Scale.Queue != 0 || c.Resources.CPU != 0 ||
		c.Resources.MaxCPU != 0 || c.Resources.MemoryBytes() != 0 || c.Resources.Pids != 0 {
		t.Fatalf("explicit zeros: %+v", c)
	}
	// A min above the default max raises the default max.
	c, err = Parse([]byte("name = \"web\"\nimage = \"web:1\"\n[scale]\nmin = 20\n"), "")
	if err != nil || c.Scale.Max != 20 {
		t.Fatalf("min 20: max %d, %v", c.Scale.Max, err)
	}
}

func TestParseErrors(t *testing.T) {
	const base = "name = \"web\"\nimage = \"web:1\"\n"
	const vol = "[volumes]\ndata = \"/data\"\n"
	long := "a" + strings.Repeat("b", 40)
	cases := []struct {
		name, toml, field, msg string
	}{
		{"unknown top key", base + "imgae = \"x\"\n", "imgae", "unknown field"},
		{"unknown nested key", base + "[scale]\nmxa = 3\n", "scale.mxa", "shoal.toml: scale.mxa: unknown field"},
		{"unknown table", base + "[sclae]\nmax = 3\n", "sclae", "unknown field"},
		{"syntax", "name = \"web\n", "name", "line 1"},
		{"volumes not a table", base + "volumes = \"/data\"\n", "volumes", "must be a table"},
		{"env not a table", base + "env = [\"A=1\"]\n", "env", "must be a table"},
		{"table twice", base + "[env]\nA = \"1\"\n[env]\nB = \"2\"\n", "env", "already been defined"},
		{"key twice", base + "name = \"x\"\n", "name", "already been defined"},
		{"scale not a table", base + "scale = 3\n", "scale", "expected table"},
		{"wrong type", base + "port = \"80\"\n", "port", "line 3"},
		{"bad duration", base + "[scale]\nidle_timeout = \"soon\"\n", "scale.idle_timeout", "invalid duration"},
		{"duration without unit", base + "[scale]\nidle_timeout = 5\n", "scale.idle_timeout", "missing unit"},
		{"no name", "image = \"web:1\"\n", "name", "required"},
		{"name upper", "name = \"Web\"\nimage = \"x\"\n", "name", "DNS label"},
		{"name digit first", "name = \"1web\"\nimage = \"x\"\n", "name", "DNS label"},
		{"name dot", "name = \"a.b\"\nimage = \"x\"\n", "name", "DNS label"},
		{"name trailing dash", "name = \"web-\"\nimage = \"x\"\n", "name", "DNS label"},
		{"name too long", "name = \"" + long + "\"\nimage = \"x\"\n", "name", "40"},
		{"no image", "name = \"web\"\n", "image", "required"},
		{"blank image", "name = \"web\"\nimage = \" \"\n", "image", "required"},
		{"image space", "name = \"web\"\nimage = \"a b\"\n", "image", "white space"},
		{"port 0", base + "port = 0\n", "port", "1-65535"},
		{"port high", base + "port = 65536\n", "port", "1-65535"},
		{"command nul", base + "command = [\"a\", \"b\\u0000\"]\n", "command[1]", "NUL"},
		{"min negative", base + "[scale]\nmin = -1\n", "scale.min", "0 or more"},
		{"max 0", base + "[scale]\nmax = 0\n", "scale.max", "at least 1"},
		{"max below min", base + "[scale]\nmin = 5\nmax = 4\n", "scale.max", "scale.min"},
		{"max too high", base + "[scale]\nmax = 1001\n", "scale.max", "1000"},
		{"concurrency 0", base + "[scale]\ntarget_concurrency = 0\n", "scale.target_concurrency", "more than 0"},
		{"concurrency nan", base + "[scale]\ntarget_concurrency = nan\n", "scale.target_concurrency", "more than 0"},
		{"queue negative", base + "[scale]\nqueue = -1\n", "scale.queue", "0 or more"},
		{"max connections negative", base + "[scale]\nmax_connections = -1\n", "scale.max_connections", "1-4096"},
		{"max connections too many", base + "[scale]\nmax_connections = 4097\n", "scale.max_connections", "1-4096"},
		{"metric name", base + "[scale]\nmetric = \"Queue Depth\"\n", "scale.metric", "lowercase"},
		{"target without metric", base + "[scale]\ntarget = 10\n", "scale.target", "needs scale.metric"},
		{"metric target 0", base + "[scale]\nmetric = \"queue\"\ntarget = 0\n", "scale.target", "more than 0"},
		{"idle negative", base + "[scale]\nidle_timeout = \"-1s\"\n", "scale.idle_timeout", "negative"},
		{"freeze negative", base + "[scale]\nfreeze_timeout = \"-1s\"\n", "scale.freeze_timeout", "negative"},
		{"lifetime negative", base + "[scale]\nmax_lifetime = \"-1h\"\n", "scale.max_lifetime", "negative"},
		{"queue timeout negative", base + "[scale]\nqueue_timeout = \"-1s\"\n", "scale.queue_timeout", "negative"},
		{"websocket timeout too short", base + "[scale]\nwebsocket_timeout = \"10ms\"\n", "scale.websocket_timeout", "1s-24h"},
		{"websocket timeout too long", base + "[scale]\nwebsocket_timeout = \"48h\"\n", "scale.websocket_timeout", "1s-24h"},
		{"rollback grace negative", base + "[scale]\nrollback_grace = \"-1s\"\n", "scale.rollback_grace", "negative"},
		{"drain negative", base + "[scale]\ndrain_timeout = \"-1s\"\n", "scale.drain_timeout", "negative"},
		{"cpu tiny", base + "[resources]\ncpu = 0.001\n", "resources.cpu", "0.01-1024"},
		{"cpu huge", base + "[resources]\ncpu = 2000\n", "resources.cpu", "0.01-1024"},
		{"cpu negative", base + "[resources]\ncpu = -1\n", "resources.cpu", "0.01-1024"},
		{"max_cpu below cpu", base + "[resources]\ncpu = 2\nmax_cpu = 1\n", "resources.max_cpu", "at least resources.cpu"},
		{"max_cpu without cpu", base + "[resources]\ncpu = 0\nmax_cpu = 1\n", "resources.max_cpu", "resources.cpu"},
		{"max_cpu huge", base + "[resources]\nmax_cpu = 4096\n", "resources.max_cpu", "0.01-1024"},
		{"memory bad", base + "[resources]\nmemory = \"lots\"\n", "resources.memory", "lots"},
		{"memory negative", base + "[resources]\nmemory = \"-1Mi\"\n", "resources.memory", "negative"},
		{"memory tiny", base + "[resources]\nmemory = \"1k\"\n", "resources.memory", "4Mi"},
		{"disk bad", base + "[resources]\ndisk = \"lots\"\n", "resources.disk", "lots"},
		{"disk none", base + "[resources]\ndisk = \"0\"\n", "resources.disk", "16Mi"},
		{"disk tiny", base + "[resources]\ndisk = \"1Mi\"\n", "resources.disk", "16Mi"},
		{"disk huge", base + "[resources]\ndisk = \"2Ti\"\n", "resources.disk", "1Ti"},
		{"disk a number", base + "[resources]\ndisk = 64\n", "resources.disk", ""},
		{"init a string", base + "init = \"yes\"\n", "init", ""},
		{"pids negative", base + "[resources]\npids = -1\n", "resources.pids", "0 (no limit)"},
		{"max_body bad", base + "[resources]\nmax_body = \"10 parsecs\"\n", "resources.max_body", "parsecs"},
		{"http and tcp", base + "[health]\nhttp = \"/h\"\ntcp = true\n", "health.tcp", "exclude"},
		{"no check", base + "[health]\ntcp = false\n", "health", "set http"},
		{"protocol unknown", base + "protocol = \"h3\"\n", "protocol", "\"h2c\""},
		{"grpc and tcp", base + "[health]\ngrpc = true\ntcp = true\n", "health.grpc", "excludes"},
		{"grpc and command", base + "[health]\ngrpc = true\ncommand = [\"true\"]\n", "health.grpc", "excludes"},
		{"grpc service alone", base + "[health]\ngrpc_service = \"echo\"\n", "health.grpc_service", "grpc = true"},
		{"grpc service space", base + "[health]\ngrpc = true\ngrpc_service = \"a b\"\n", "health.grpc_service", "white space"},
		{"http relative", base + "[health]\nhttp = \"healthz\"\n", "health.http", "starting with /"},
		{"http space", base + "[health]\nhttp = \"/a b\"\n", "health.http", "white space"},
		{"command and http", base + "[health]\nhttp = \"/h\"\ncommand = [\"true\"]\n", "health.command", "health.http"},
		{"command and tcp", base + "[health]\ntcp = true\ncommand = [\"true\"]\n", "health.command", "health.tcp"},
		{"command empty", base + "[health]\ncommand = []\n", "health.command", "must name a program"},
		{"command blank", base + "[health]\ncommand = [\" \", \"x\"]\n", "health.command", "must name a program"},
		{"command NUL", base + "[health]\ncommand = [\"sh\", \"-c\", \"a\\u0000b\"]\n", "health.command[2]", "NUL"},
		{"command string", base + "[health]\ncommand = \"test -f /tmp/ok\"\n", "health.command", "line 4"},
		{"command number", base + "[health]\ncommand = [\"sh\", 1]\n", "health.command", "line 4"},
		{"interval 0", base + "[health]\ninterval = \"0s\"\n", "health.interval", "more than 0"},
		{"timeout 0", base + "[health]\ntimeout = \"0s\"\n", "health.timeout", "more than 0"},
		{"failures 0", base + "[health]\nfailures = 0\n", "health.failures", "at least 1"},
		{"failure threshold 0", base + "[health]\nfailure_threshold = 0\n", "health.failure_threshold", "at least 1"},
		{"success threshold 0", base + "[health]\nsuccess_threshold = 0\n", "health.success_threshold", "at least 1"},
		{"start timeout 0", base + "[health]\nstart_timeout = \"0s\"\n", "health.start_timeout", "more than 0"},
		{"volume name", base + "[volumes]\nData = \"/data\"\n", "volumes.Data", "DNS label"},
		{"volume relative", base + "[volumes]\ndata = \"data\"\n", "volumes.data", "absolute"},
		{"volume root", base + "[volumes]\ndata = \"/\"\n", "volumes.data", "not /"},
		{"volume unclean", base + "[volumes]\ndata = \"/data/../etc\"\n", "volumes.data", "clean"},
		{"volume proc", base + "[volumes]\ndata = \"/proc/x\"\n", "volumes.data", "/proc"},
		{"volume twice", base + "[volumes]\na = \"/data\"\nb = \"/data\"\n", "volumes.b", "volume \"a\""},
		{"env key", base + "[env]\n\"1A\" = \"x\"\n", "env.1A", "identifier"},
		{"env dash", base + "[env]\n\"A-B\" = \"x\"\n", "env.A-B", "identifier"},
		{"env PORT", base + "[env]\nPORT = \"1\"\n", "env.PORT", "set by shoal"},
		{"env SHOAL_", base + "[env]\nSHOAL_APP = \"x\"\n", "env.SHOAL_APP", "set by shoal"},
		{"env value type", base + "[env]\nA = 1\n", "env.A", "line 4"},
		{"state not a table", base + "state = \"/state\"\n", "state", "expected table"},
		{"traffic unknown key", base + "[traffic]\nstiky = true\n", "traffic.stiky", "unknown field"},
		{"traffic sticky not a bool", base + "[traffic]\nsticky = \"yes\"\n", "traffic.sticky", "line 4"},
		{"traffic not a table", base + "traffic = true\n", "traffic", "expected table"},
		{"state unknown key", base + vol + "[state]\ndir = \"/state\"\nmerge = \"append\"\npolicy = \"x\"\n", "state.policy", "unknown field"},
		{"state without dir", base + vol + "[state]\nmerge = \"append\"\n", "state.dir", "required"},
		{"state dir relative", base + vol + "[state]\ndir = \"state\"\nmerge = \"append\"\n", "state.dir", "absolute"},
		{"state dir root", base + vol + "[state]\ndir = \"/\"\nmerge = \"append\"\n", "state.dir", "not /"},
		{"state dir unclean", base + vol + "[state]\ndir = \"/state/\"\nmerge = \"append\"\n", "state.dir", "clean"},
		{"state dir proc", base + vol + "[state]\ndir = \"/proc/state\"\nmerge = \"append\"\n", "state.dir", "/proc"},
		{"state dir in volume", base + vol + "[state]\ndir = \"/data/state\"\nmerge = \"append\"\n", "state.dir", "overlaps volume \"data\""},
		{"state dir over volume", base + vol + "[state]\ndir = \"/data\"\nmerge = \"append\"\n", "state.dir", "overlaps"},
		{"state dir type", base + vol + "[state]\ndir = 1\n", "state.dir", "line 6"},
		{"state no merge", base + vol + "[state]\ndir = \"/state\"\n", "state.merge", "required"},
		{"state bad merge", base + vol + "[state]\ndir = \"/state\"\nmerge = \"concat\"\n", "state.merge", "\"concat\" must be"},
		{"state hook missing", base + vol + "[state]\ndir = \"/state\"\nmerge = \"hook\"\n", "state.hook", "required for merge = \"hook\""},
		{"state hook empty", base + vol + "[state]\ndir = \"/state\"\nmerge = \"hook\"\nhook = []\n", "state.hook", "required"},
		{"state hook blank", base + vol + "[state]\ndir = \"/state\"\nmerge = \"hook\"\nhook = [\"\"]\n", "state.hook[0]", "name a command"},
		{"state hook nul", base + vol + "[state]\ndir = \"/state\"\nmerge = \"hook\"\nhook = [\"sh\", \"a\\u0000\"]\n", "state.hook[1]", "NUL"},
		{"state hook not hook", base + vol + "[state]\ndir = \"/state\"\nmerge = \"append\"\nhook = [\"sh\"]\n", "state.hook", "only for merge = \"hook\""},
		{"state hook string", base + vol + "[state]\ndir = \"/state\"\nmerge = \"hook\"\nhook = \"sh\"\n", "state.hook", "line 8"},
		{"state no volume", base + "[state]\ndir = \"/state\"\nmerge = \"append\"\n", "state.volume", "declare one under [volumes]"},
		{"state which volume", base + "[volumes]\na = \"/a\"\nb = \"/b\"\n[state]\ndir = \"/state\"\nmerge = \"append\"\n", "state.volume", "one of a, b"},
		{"state unknown volume", base + vol + "[state]\ndir = \"/state\"\nmerge = \"append\"\nvolume = \"logs\"\n", "state.volume", "\"logs\" is not a volume"},
		{"placement node name", base + "[placement]\nnodes = [\"n 1\"]\n", "placement.nodes[0]", "not a node name"},
		{"placement node twice", base + "[placement]\nnodes = [\"n1\", \"n2\", \"n1\"]\n", "placement.nodes[2]", "listed twice"},
		{"placement prefer outside nodes", base + "[placement]\nnodes = [\"n1\", \"n2\"]\nprefer = [\"n3\"]\n", "placement.prefer[0]", "not one of placement.nodes (n1, n2)"},
		{"placement apart itself", base + "[placement]\napart = [\"db\", \"web\"]\n", "placement.apart[1]", "the app itself"},
		{"placement apart and with", base + "[placement]\napart = [\"db\"]\nwith = [\"db\"]\n", "placement.apart[0]", "also in placement.with"},
		{"placement with bad app", base + "[placement]\nwith = [\"Cache\"]\n", "placement.with[0]", "not an app name"},
		{"placement unknown key", base + "[placement]\nzone = \"a\"\n", "placement.zone", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.toml), "shoal.toml")
			if err == nil {
				t.Fatalf("no error for\n%s", c.toml)
			}
			if !errors.Is(err, errdefs.ErrInvalid) || errdefs.Field(err) != c.field {
				t.Fatalf("error %q: field %q, invalid %v; want field %q", err, errdefs.Field(err), errdefs.IsInvalid(err), c.field)
			}
			if !strings.HasPrefix(err.Error(), "shoal.toml: ") || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q: want the file name and %q", err, c.msg)
			}
		})
	}
}

func TestParseValid(t *testing.T) {
	const base = "name = \"web\"\nimage = \"web:1\"\n"
	for name, extra := range map[string]string{
		"name of 40":      "", // below, the name is replaced
		"min equals max":  "[scale]\nmin = 3\nmax = 3\n",
		"max 1000":        "[scale]\nmax = 1000\n",
		"never freeze":    "[scale]\nfreeze_timeout = \"0s\"\nmax_lifetime = \"0s\"\n",
		"cpu bounds":      "[resources]\ncpu = 0.01\nmax_cpu = 1024\n",
		"disk bounds":     "[resources]\ndisk = \"16Mi\"\n",
		"disk most":       "[resources]\ndisk = \"1Ti\"\n",
		"no init":         "init = false\n",
		"tcp check":       "[health]\ntcp = true\n",
		"grpc":            "protocol = \"grpc\"\n[health]\ngrpc = true\ngrpc_service = \"grpcecho.Echo\"\n",
		"h2c":             "protocol = \"h2c\"\n",
		"http1":           "protocol = \"http1\"\n",
		"http with query": "[health]\nhttp = \"/healthz?deep=1\"\n",
		"command check":   "[health]\ncommand = [\"/bin/sh\", \"-c\", \"test -f /tmp/ok\"]\ninterval = \"500ms\"\n",
		"volumes":         "[volumes]\na = \"/data\"\nb-2 = \"/var/lib/b\"\n",
		"env":             "[env]\n_X = \"\"\nGREETING = \"hi there\"\nPORTAL = \"x\"\n",
		"command":         "command = [\"/hello\", \"--flag\"]\n",
		"state hook":      "[volumes]\na = \"/a\"\nb = \"/b\"\n[state]\ndir = \"/var/state\"\nmerge = \"hook\"\nhook = [\"sh\", \"-c\", \"cat /var/state/* >> /b/all\"]\nvolume = \"b\"\n",
		"state newest":    "[volumes]\na = \"/a\"\n[state]\ndir = \"/a-state\"\nmerge = \"newest\"\n",
		"app metric":      "[scale]\nmetric = \"queue\"\ntarget = 2.5\n",
		"placement":       "[placement]\nnodes = [\"n1\", \"node-2.b\"]\nprefer = [\"n1\"]\napart = [\"db\"]\nwith = [\"cache\"]\n",
	} {
		doc := base + extra
		if name == "name of 40" {
			doc = "name = \"a" + strings.Repeat("b", 38) + "c\"\nimage = \"web:1\"\n"
		}
		if _, err := Parse([]byte(doc), "shoal.toml"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParseState(t *testing.T) {
	const base = "name = \"web\"\nimage = \"web:1\"\n"
	c, err := Parse([]byte(base+"[volumes]\nlogs = \"/logs\"\n[state]\ndir = \"/state\"\nmerge = \"append\"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	want := State{Dir: "/state", Merge: MergeAppend, Volume: "logs"}
	if !reflect.DeepEqual(c.State, want) || !c.State.Enabled() {
		t.Fatalf("state %+v, want %+v (the only volume by default)", c.State, want)
	}
	c, err = Parse([]byte(base+"[volumes]\na = \"/a\"\nb = \"/b\"\n[state]\ndir = \"/s\"\nmerge = \"hook\"\nhook = [\"sh\", \"-c\", \"x\"]\nvolume = \"b\"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	want = State{Dir: "/s", Merge: MergeHook, Hook: []string{"sh", "-c", "x"}, Volume: "b"}
	if !reflect.DeepEqual(c.State, want) {
		t.Fatalf("state %+v, want %+v", c.State, want)
	}
	// No [state]: nothing, and the hash of an app without it is what it
	// was before the table existed.
	c, err = Parse([]byte(base+"[volumes]\na = \"/a\"\n"), "")
	if err != nil || c.State.Enabled() || c.State.Volume != "" {
		t.Fatalf("no state: %+v, %v", c.State, err)
	}
	if b, _ := json.Marshal(c); strings.Contains(string(b), "State") || strings.Contains(string(b), "Merge") {
		t.Fatalf("an app without [state] has it in its hashed form: %s", b)
	}
}

// An app metric without a target gets the default one.
func TestParseMetricDefault(t *testing.T) {
	c, err := Parse([]byte("name = \"web\"\nimage = \"web:1\"\n[scale]\nmetric = \"queue\"\n"), "shoal.toml")
	if err != nil || c.Scale.Metric != "queue" || c.Scale.Target != DefaultTarget {
		t.Fatalf("%+v %v", c.Scale, err)
	}
}

func TestHash(t *testing.T) {
	parse := func(doc string) Config {
		t.Helper()
		c, err := Parse([]byte(doc), "shoal.toml")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := parse("name = \"web\"\nimage = \"web:1\"\n[env]\nA = \"1\"\nB = \"2\"\n")
	// Same meaning: other key order, defaults spelled out, memory in bytes.
	b := parse(`image = "web:1"
name = "web"
port = 8080
[env]
B = "2"
A = "1"
[scale]
max = 10
idle_timeout = "30000ms"
[resources]
memory = "268435456"
[health]
tcp = true
`)
	if a.Hash() != b.Hash() {
		t.Fatalf("equal configs hash differently:\n%+v\n%+v", a, b)
	}
	if len(a.Hash()) != 64 || a.Hash() != a.Hash() {
		t.Fatalf("hash %q", a.Hash())
	}
	// [traffic] changes the route, not the replicas: no new revision.
	if c := parse("name = \"web\"\nimage = \"web:1\"\n[env]\nA = \"1\"\nB = \"2\"\n[traffic]\nsticky = true\n"); !c.Traffic.Sticky || c.Hash() != a.Hash() {
		t.Errorf("[traffic] sticky = true: sticky %v, hash %s, want %s", c.Traffic.Sticky, c.Hash(), a.Hash())
	}
	// protocol = "http1" is the default, spelled out.
	if c := parse("name = \"web\"\nimage = \"web:1\"\nprotocol = \"http1\"\n[env]\nA = \"1\"\nB = \"2\"\n"); c.Protocol != "" || c.H2C() || c.Hash() != a.Hash() {
		t.Errorf("protocol = \"http1\": protocol %q, hash %s, want %s", c.Protocol, c.Hash(), a.Hash())
	}
	if c := parse("name = \"web\"\nimage = \"web:1\"\nprotocol = \"grpc\"\n[health]\ngrpc = true\n"); !c.H2C() || c.Health.TCP || c.Hash() == a.Hash() {
		t.Errorf("protocol = \"grpc\": h2c %v, tcp %v", c.H2C(), c.Health.TCP)
	}
	// An empty [placement] is none.
	if c := parse("name = \"web\"\nimage = \"web:1\"\n[env]\nA = \"1\"\nB = \"2\"\n[placement]\nnodes = []\n"); c.Hash() != a.Hash() {
		t.Errorf("empty [placement]: hash %s, want %s", c.Hash(), a.Hash())
	}
	for _, doc := range []string{
		"name = \"web\"\nimage = \"web:1\"\n[env]\nA = \"1\"\nB = \"2\"\n[placement]\nnodes = [\"n1\"]\n",
		"name = \"web\"\nimage = \"web:2\"\n[env]\nA = \"1\"\nB = \"2\"\n",
		"name = \"web\"\nimage = \"web:1\"\n[env]\nA = \"1\"\nB = \"3\"\n",
		"name = \"web\"\nimage = \"web:1\"\n[env]\nA = \"1\"\nB = \"2\"\n[scale]\nmax = 11\n",
	} {
		if parse(doc).Hash() == a.Hash() {
			t.Errorf("different config, same hash:\n%s", doc)
		}
	}
}
