package runtime

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shoal-run/shoal/internal/errdefs"
)

var update = flag.Bool("update", false, "rewrite golden files")

// goldenInput is the input half of a golden spec file.
type goldenInput struct {
	ID             string
	Args           []string
	Env            []string
	Cwd            string
	Hostname       string
	ReadOnlyRootfs bool
	Limits         Limits
	NetNSPath      string
	Mounts         []Mount
	Rlimits        []specs.POSIXRlimit
	Capabilities   []string
	User           user
	HostRlimitHard map[string]uint64
	CgroupNS       bool
	CgroupV2       bool
}

const goldenSep = "\n---- config.json ----\n"

// TestSpecGolden generates config.json for each testdata/specs/*.golden input
// and compares it with the expected half (go test -run SpecGolden -update
// rewrites it). The default seccomp profile is checked by TestSeccompGolden
// and shown here as "default".
func TestSpecGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/specs/*.golden")
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			in, want, _ := strings.Cut(string(raw), goldenSep)
			var gi goldenInput
			dec := json.NewDecoder(strings.NewReader(in))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&gi); err != nil {
				t.Fatalf("input: %v", err)
			}
			s := Spec{ID: gi.ID, Args: gi.Args, Env: gi.Env, Cwd: gi.Cwd, Hostname: gi.Hostname,
				ReadOnlyRootfs: gi.ReadOnlyRootfs, Limits: gi.Limits, NetNSPath: gi.NetNSPath,
				Mounts: gi.Mounts, Rlimits: gi.Rlimits, Capabilities: gi.Capabilities}
			spec, err := generate(&s, gi.User, hostInfo{rlimitHard: gi.HostRlimitHard, cgroupNS: gi.CgroupNS, cgroupV2: gi.CgroupV2})
			var got string
			if err != nil {
				got = "error: " + err.Error() + "\n"
			} else {
				if reflect.DeepEqual(spec.Linux.Seccomp, DefaultSeccomp()) {
					spec.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: "default"}
				}
				b, _ := json.MarshalIndent(spec, "", "  ")
				got = string(b) + "\n"
			}
			if *update {
				if err := os.WriteFile(f, []byte(strings.TrimRight(in, "\n")+goldenSep+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Fatalf("generated spec differs from %s (run with -update to accept):\n%s", f, got)
			}
		})
	}
}

func TestSeccompGolden(t *testing.T) {
	sc := DefaultSeccomp()
	sc.Architectures = nil // per GOARCH; checked below
	b, _ := json.MarshalIndent(sc, "", "  ")
	b = append(b, '\n')
	f := "testdata/seccomp-default.golden"
	if *update {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("default seccomp profile differs from %s (run with -update to accept)", f)
	}
	if len(DefaultSeccomp().Architectures) == 0 {
		t.Fatal("no seccomp architecture for this GOARCH")
	}
	for _, banned := range []string{"unshare", "setns", "mount", "umount2", "keyctl", "add_key", "request_key",
		"ptrace", "bpf", "perf_event_open", "kexec_load", "init_module", "pivot_root", "swapon", "reboot",
		"settimeofday", "open_by_handle_at", "userfaultfd", "process_vm_readv", "process_vm_writev"} {
		for _, n := range allowedSyscalls {
			if n == banned {
				t.Errorf("%s is allowed", banned)
			}
		}
	}
}

func TestRlimitsWithinHost(t *testing.T) {
	host := map[string]uint64{"RLIMIT_NOFILE": 20000, "RLIMIT_NPROC": 100}
	got, err := rlimits(nil, host)
	if err != nil || len(got) != 1 || got[0].Hard != 20000 || got[0].Soft != 20000 {
		t.Fatalf("default: %+v %v", got, err)
	}
	_, err = rlimits([]specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 30000, Hard: 30000}}, host)
	if errdefs.Field(err) != "rlimits[0]" || !strings.Contains(err.Error(), "20000") {
		t.Fatalf("above host: %v", err)
	}
	_, err = rlimits([]specs.POSIXRlimit{{Type: "RLIMIT_BOGUS"}}, host)
	if errdefs.Field(err) != "rlimits[0].type" {
		t.Fatalf("bogus: %v", err)
	}
	got, err = rlimits([]specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Soft: 50, Hard: 100}}, host)
	if err != nil || len(got) != 2 {
		t.Fatalf("nproc: %+v %v", got, err)
	}
}

func TestResolveUser(t *testing.T) {
	root := t.TempDir()
	_ = os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	_ = os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nweb:x:33:34::/var/www:/bin/sh\n"), 0o644)
	_ = os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nwww:x:34:\nlog:x:4:web,x\nops:x:9:\n"), 0o644)
	tests := []struct {
		in   string
		want user
		err  bool
	}{
		{"", user{Home: "/root"}, false},
		{"web", user{UID: 33, GID: 34, Groups: []uint32{4}, Home: "/var/www"}, false},
		{"33", user{UID: 33, GID: 34, Groups: []uint32{4}, Home: "/var/www"}, false},
		{"web:ops", user{UID: 33, GID: 9, Groups: []uint32{4}, Home: "/var/www"}, false},
		{"1234:5678", user{UID: 1234, GID: 5678}, false},
		{"ghost", user{}, true},
		{"web:ghosts", user{}, true},
		{":1", user{}, true},
	}
	for _, tc := range tests {
		got, err := resolveUser(root, tc.in)
		if tc.err {
			if errdefs.Field(err) != "user" {
				t.Errorf("%q: error %v, want invalid user", tc.in, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
	// A link out of the rootfs is resolved inside it.
	evil := t.TempDir()
	_ = os.MkdirAll(filepath.Join(evil, "etc"), 0o755)
	_ = os.Symlink("/etc/passwd", filepath.Join(evil, "etc", "passwd"))
	if _, err := resolveUser(evil, "root"); errdefs.Field(err) != "user" {
		t.Fatalf("link escaped the rootfs: %v", err)
	}
}
