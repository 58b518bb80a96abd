package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckpointRestoreRootfsWrites: a process holding open a file it
// wrote to its root file system at boot (a framework's SQLite database,
// say) is restored, in a container of its own and in one in a user
// namespace: the checkpoint carries the writable layer, so CRIU finds the
// file (it failed: "Can't open file db on restore"), and the restored
// container's root file system has it, and a file deleted at boot stays
// deleted (an overlay whiteout).
func TestCheckpointRestoreRootfsWrites(t *testing.T) {
	r := newTestRuntime(t, nil)
	needCRIU(t, r)
	const host = 3000262144
	if err := UserNSUsable(host, 65536); err != nil {
		t.Fatal(err)
	}
	for _, userns := range []*UserNS{nil, {HostID: host, Size: 65536}} {
		spec := func() Spec {
			s := baseSpec(t, "sh", "-c", "[ -e /db ] || { echo boot >/db; rm /bin/true; }; exec 3</db; while :; do sleep 0.05; done")
			s.NetNSPath, s.Checkpointable, s.UserNS = testNetNS(t), true, userns
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pr.Close(); pw.Close() })
			s.Stdout, s.Stderr = pw, pw
			return s
		}
		s := spec()
		runClosing(t, r, s)
		c, err := r.Get(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		db := func(pid int) string { return fmt.Sprintf("/proc/%d/root/db", pid) }
		deadline := time.Now().Add(30 * time.Second)
		for b, _ := os.ReadFile(db(c.Pid)); string(b) != "boot\n"; b, _ = os.ReadFile(db(c.Pid)) {
			if time.Now().After(deadline) {
				t.Fatalf("user namespace %v: the container did not write /db", userns)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // until it holds /db open
		_, err = os.Lstat(fmt.Sprintf("/proc/%d/root/bin/true", c.Pid))
		deleted := os.IsNotExist(err)
		img := filepath.Join(t.TempDir(), "img")
		if err := r.Checkpoint(context.Background(), s.ID, img); err != nil {
			t.Fatalf("user namespace %v: checkpoint: %v", userns, err)
		}
		wait(t, r, s.ID)
		if err := r.Delete(context.Background(), s.ID); err != nil {
			t.Fatal(err)
		}
		rs := spec()
		rs.RestoreFrom = img
		runClosing(t, r, rs)
		rc, err := r.Get(rs.ID)
		if err != nil || rc.Status != StatusRunning {
			t.Fatalf("user namespace %v: restored container: %+v, %v", userns, rc, err)
		}
		if b, err := os.ReadFile(db(rc.Pid)); err != nil || string(b) != "boot\n" {
			t.Errorf("user namespace %v: restored container's /db: %q, %v", userns, b, err)
		}
		if _, err := os.Lstat(fmt.Sprintf("/proc/%d/root/bin/true", rc.Pid)); os.IsNotExist(err) != deleted {
			t.Errorf("user namespace %v: /bin/true deleted %v in the dumped container, %v in the restored one (%v)", userns, deleted, !deleted, err)
		}
		if err := r.Delete(context.Background(), rs.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCRIUErrorCause: the error quoted from CRIU's log is the first of
// the last run of errors before "Restoring FAILED", not a helper's error
// after it.
func TestCRIUErrorCause(t *testing.T) {
	log := filepath.Join(t.TempDir(), "restore.log")
	text := "(00.2) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted\n" +
		"(00.3)      6: Further fle=0x7fe7ffec27f8, pid=6\n" +
		"(00.36)      6: Error (criu/files-reg.c:2353): Can't open file db on restore: No such file or directory\n" +
		"(00.37)      6: Error (criu/files.c:1221): Unable to open fd=3 id=0x22\n" +
		"(00.38) uns: daemon stopped\n" +
		"(00.39) Error (criu/cr-restore.c:2331): Restoring FAILED.\n" +
		"(00.40) Error (criu/cgroup.c:2055): cg: cgroupd: recv req error: No such file or directory\n"
	if err := os.WriteFile(log, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	want := " (criu: (00.36)      6: Error (criu/files-reg.c:2353): Can't open file db on restore: No such file or directory)"
	if got := criuError(log); got != want {
		t.Errorf("criuError = %q, want %q", got, want)
	}
	if err := os.WriteFile(log, []byte("(00.1) Error (a): one\n(00.2) x\n(00.3) Error (b): two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := criuError(log); got != " (criu: (00.3) Error (b): two)" {
		t.Errorf("criuError without FAILED = %q", got)
	}
}
