package serving

import (
	"errors"
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
func (ctl *appCtl) logLoop(id string, exited <-chan struct{}) {
	for {
		t := ctl.m.clock.NewTimer(logCheck)
		select {
		case <-t.C():
		case <-exited:
			t.Stop()
			ctl.logs.trim(id)
			return
		case <-ctl.stop:
			t.Stop()
			return
		}
		ctl.logs.trim(id)
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
