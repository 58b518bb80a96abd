package serving

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/node"
)

// The log file helpers are the node's: a replica's log is written on its
// node.
var (
	rotateLog = node.RotateLog
	tailLog   = node.TailLog
	tailFile  = node.TailFile
)

// Replica logs: each replica's stdout and stderr go to <app>/logs/<id>.log,
// a file the container writes itself (it outlives a daemon restart). Past
// logMax bytes the file is copied to <id>.log.1 and truncated; the container
// appends (O_APPEND), so it goes on writing at the new end. The logs of
// replicas that are gone are kept for the keepLogs most recently written.
const (
	logMax   = node.LogMax
	keepLogs = 5
)

// replicaLogs are the logs of an app's replicas, in dir.
type replicaLogs struct {
	dir string
	log *slog.Logger
}

// path is replica id's log.
func (l replicaLogs) path(id string) string { return filepath.Join(l.dir, id+".log") }

// logCheck is how often a replica's log is checked against logMax while
// the replica runs, whatever its health check's interval.
const logCheck = time.Second

// logLoop keeps replica id's log under logMax from its start to its exit,
// and checks it once more then: a replica that writes as fast as it can
// leaves about a second's worth above the limit at most.
func (d *driver) logLoop(id string, exited <-chan struct{}) {
	for {
		t := d.m.clock.NewTimer(logCheck)
		select {
		case <-t.C():
		case <-exited:
			t.Stop()
			d.logs.trim(id)
			return
		case <-d.stop:
			t.Stop()
			return
		}
		d.logs.trim(id)
	}
}

// trimLog rotates replica id's log if it is over logMax.
func (l replicaLogs) trim(id string) {
	if err := rotateLog(l.path(id), logMax); err != nil && !errors.Is(err, os.ErrNotExist) {
		l.log.Warn("serving: replica log", "replica", id, "err", err)
	}
}

// logFile is one replica's log and when it was last written.
type logFile struct {
	id  string
	mod time.Time
}

// logFiles lists the app's replica logs, least recently written first.
func (l replicaLogs) files() ([]logFile, error) {
	files, err := os.ReadDir(l.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var lfs []logFile
	for _, f := range files {
		if id, ok := strings.CutSuffix(f.Name(), ".log"); ok {
			if fi, err := f.Info(); err == nil {
				lfs = append(lfs, logFile{id, fi.ModTime()})
			}
		}
	}
	sort.Slice(lfs, func(i, j int) bool { return lfs[i].mod.Before(lfs[j].mod) })
	return lfs, nil
}

// pruneLogs removes the logs of replicas that are gone, but for the
// keepLogs most recently written: `shoal app logs` still shows why the last
// replicas crashed. known tells the app's replicas.
func (l replicaLogs) prune(known func(id string) bool) {
	lfs, err := l.files()
	if err != nil {
		l.log.Warn("serving: list replica logs", "dir", l.dir, "err", err)
		return
	}
	var gone []string
	for _, lf := range lfs {
		if !known(lf.id) {
			gone = append(gone, lf.id)
		}
	}
	for _, id := range gone[:max(len(gone)-keepLogs, 0)] {
		for _, p := range []string{l.path(id), l.path(id) + ".1"} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.log.Warn("serving: remove replica log", "replica", id, "err", err)
			}
		}
	}
}

// Logs writes the last tail lines of each of the app's replica logs, least
// recently written first, each line prefixed with the replica's id. In a
// cluster, the log of a replica on another node is read from that node;
// one that cannot be read says so in its place.
func (m *Manager) Logs(ctx context.Context, name string, tail int, w io.Writer) error {
	ctl := m.app(name)
	if ctl == nil {
		return m.noApp(name)
	}
	lfs, err := ctl.logs.files()
	if err != nil {
		return fmt.Errorf("app %q: logs: %w", name, err)
	}
	remote := map[string][]string{}
	if m.disp != nil {
		lfs = m.remoteLogs(ctx, ctl, tail, lfs, remote)
	}
	for _, lf := range lfs {
		lines, ok := remote[lf.id]
		if !ok {
			lines = tailLog(ctl.logs.path(lf.id), tail)
		}
		for _, line := range lines {
			if _, err := fmt.Fprintf(w, "%s | %s\n", lf.id, line); err != nil {
				return err
			}
		}
	}
	return nil
}

// remoteLogs reads the ends of the logs of ctl's replicas on other nodes
// into tails and returns lfs with them in place of any file of the same
// replica here, least recently written first.
func (m *Manager) remoteLogs(ctx context.Context, ctl *appCtl, tail int, lfs []logFile, tails map[string][]string) []logFile {
	var ids []string
	ctl.mu.Lock()
	for id, r := range ctl.reps {
		if r.rec.Node != "" && r.rec.Node != m.o.Node {
			ids = append(ids, id)
		}
	}
	ctl.unlock()
	for _, id := range ids {
		cctx, cancel := context.WithTimeout(ctx, remoteTailLimit)
		t, err := m.disp.ReadLog(cctx, id, ctl.logs.path(id), tail)
		cancel()
		if err != nil {
			t.Lines = []string{fmt.Sprintf("(log not read: %v)", err)}
		}
		tails[id] = t.Lines
		lfs = append(lfs, logFile{id, t.Mod})
	}
	out := lfs[:0]
	for i, lf := range lfs {
		if _, ok := tails[lf.id]; ok && i < len(lfs)-len(ids) {
			continue // a file here of a replica that runs elsewhere
		}
		out = append(out, lf)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].mod.Before(out[j].mod) })
	return out
}
