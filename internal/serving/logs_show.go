package serving

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/node"
)

// logPoll is how often a follow of an app's logs looks for new lines.
const logPoll = 250 * time.Millisecond

// logSource is a replica's log as Logs reads it: the file here, or on the
// node the replica runs on (remote), and how far it has been read.
type logSource struct {
	id     string
	remote bool
	mod    time.Time
	cursor node.LogCursor
}

// Logs writes the lines of the app's replicas that req selects (see
// types.LogsRequest), merged by time, each as "ID | TEXT" (see
// node.WriteLogLine); with req.Follow it then writes the lines written
// later, those of replicas started since included, until ctx ends or the
// app is removed. In a cluster, the log of a replica on another node is
// read from that node; one that cannot be read says so in its place.
func (m *Manager) Logs(ctx context.Context, name string, req types.LogsRequest, w io.Writer) error {
	ctl := m.app(name)
	if ctl == nil {
		return m.noApp(name)
	}
	srcs, err := m.logSources(ctl, req.Replica)
	if err != nil {
		return fmt.Errorf("app %q: logs: %w", name, err)
	}
	lines := map[string][]node.LogLine{}
	for _, src := range srcs {
		t, err := m.readTail(ctx, ctl, src, req.Tail)
		switch {
		case err != nil && !src.remote:
			continue // gone since listed
		case err != nil:
			t.Lines = []string{fmt.Sprintf("(log not read: %v)", err)}
		}
		src.cursor = t.Cursor
		lines[src.id] = node.LogLines(src.id, t.Lines, time.Time{})
	}
	// Lines of the same time (those without a stamp) in the order of
	// their logs' last writes.
	sort.SliceStable(srcs, func(i, j int) bool { return srcs[i].mod.Before(srcs[j].mod) })
	var logs [][]node.LogLine
	for _, src := range srcs {
		logs = append(logs, lines[src.id])
	}
	if err := writeLogLines(w, node.SelectLogs(logs, req.Since, req.Tail), req.Timestamps); err != nil || !req.Follow {
		return err
	}
	return m.followLogs(ctx, ctl, req, srcs, w)
}

// logSources lists the logs of ctl's replicas whose id starts with prefix,
// least recently written first: the files here, and those of the replicas
// on other nodes (in place of any file of theirs here).
func (m *Manager) logSources(ctl *appCtl, prefix string) ([]*logSource, error) {
	lfs, err := ctl.logs.files()
	if err != nil {
		return nil, err
	}
	remote := map[string]bool{}
	if m.disp != nil {
		ctl.mu.Lock()
		for id, r := range ctl.reps {
			if r.rec.Node != "" && r.rec.Node != m.o.Node {
				remote[id] = true
			}
		}
		ctl.unlock()
	}
	var srcs []*logSource
	for _, lf := range lfs {
		if !remote[lf.id] && strings.HasPrefix(lf.id, prefix) {
			srcs = append(srcs, &logSource{id: lf.id, mod: lf.mod})
		}
	}
	for id := range remote {
		if strings.HasPrefix(id, prefix) {
			srcs = append(srcs, &logSource{id: id, remote: true})
		}
	}
	return srcs, nil
}

// readTail reads the last n lines of src's log (n <= 0: all kept), and
// orders src by when its log was last written.
func (m *Manager) readTail(ctx context.Context, ctl *appCtl, src *logSource, n int) (LogTail, error) {
	if !src.remote {
		path := ctl.logs.path(src.id)
		fi, err := os.Stat(path)
		if err != nil {
			return LogTail{}, err
		}
		t := LogTail{Mod: fi.ModTime()}
		t.Lines, t.Cursor, err = node.TailLogAt(path, n)
		return t, err
	}
	cctx, cancel := context.WithTimeout(ctx, remoteTailLimit)
	defer cancel()
	t, err := m.disp.ReadLog(cctx, src.id, ctl.logs.path(src.id), n)
	src.mod = t.Mod
	return t, err
}

// followLogs writes, every logPoll, the lines that the logs of ctl's
// replicas (those selected by req) gained, merged by time; srcs are the
// logs read so far, each with its cursor. A replica seen for the first
// time is read from the start of its log; one whose log is gone, and
// which is no longer listed, is no longer read.
func (m *Manager) followLogs(ctx context.Context, ctl *appCtl, req types.LogsRequest, srcs []*logSource, w io.Writer) error {
	known := map[string]*logSource{}
	for _, s := range srcs {
		known[s.id] = s
	}
	flusher, _ := w.(http.Flusher)
	var buf bytes.Buffer
	for {
		t := m.clock.NewTimer(logPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		if m.app(ctl.name) != ctl {
			return nil // the app is gone
		}
		listed := map[string]bool{}
		if cur, err := m.logSources(ctl, req.Replica); err == nil {
			for _, s := range cur {
				listed[s.id] = true
				if k := known[s.id]; k == nil {
					known[s.id] = s
				} else if s.remote {
					k.remote = true
				}
			}
		}
		ids := make([]string, 0, len(known))
		for id := range known {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		var logs [][]node.LogLine
		for _, id := range ids {
			s := known[id]
			t, err := m.readFrom(ctx, ctl, s)
			if err != nil {
				if (errors.Is(err, os.ErrNotExist) || errdefs.IsNotFound(err)) && !listed[id] {
					delete(known, id)
				}
				continue
			}
			if len(t.Lines) > 0 {
				logs = append(logs, node.LogLines(id, t.Lines, s.cursor.Time))
			}
			s.cursor = t.Cursor
		}
		buf.Reset()
		writeLogLines(&buf, node.SelectLogs(logs, req.Since, 0), req.Timestamps)
		if buf.Len() > 0 {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return err
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}

// readFrom reads what src's log gained since its cursor.
func (m *Manager) readFrom(ctx context.Context, ctl *appCtl, src *logSource) (LogTail, error) {
	path := ctl.logs.path(src.id)
	if !src.remote || m.disp == nil {
		var t LogTail
		var err error
		t.Lines, t.Cursor, err = node.ReadLogFrom(path, src.cursor)
		return t, err
	}
	cctx, cancel := context.WithTimeout(ctx, remoteTailLimit)
	defer cancel()
	return m.disp.FollowLog(cctx, src.id, path, src.cursor)
}

// writeLogLines writes lines as `shoal app logs` shows them.
func writeLogLines(w io.Writer, lines []node.LogLine, stamps bool) error {
	for l := range slices.Values(lines) {
		if err := node.WriteLogLine(w, l, stamps); err != nil {
			return err
		}
	}
	return nil
}
