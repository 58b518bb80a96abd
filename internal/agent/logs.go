package agent

import (
	"context"
	"errors"
	"net/http"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
	"github.com/shoal-run/shoal/internal/node"
)

// tailReq asks for the last Lines lines of a replica's log at Log, a path
// relative to the node's apps folder, or with From, for what it gained
// since that cursor.
type tailReq struct {
	Log   string          `json:"log"`
	Lines int             `json:"lines"`
	From  *node.LogCursor `json:"from,omitempty"`
}

var (
	_ node.LogTailer   = (*Remote)(nil)
	_ node.LogFollower = (*Remote)(nil)
)

// TailLog reads the last n lines of the replica's log on its node (n <= 0:
// all that the last MiB holds).
func (r *Remote) TailLog(ctx context.Context, id, log string, n int) (node.LogTail, error) {
	var t logTail
	err := r.post(ctx, r.path(id, "log"), tailReq{Log: log, Lines: n}, &t)
	return t.tail(), err
}

// FollowLog reads what the replica's log on its node gained since c.
func (r *Remote) FollowLog(ctx context.Context, id, log string, c node.LogCursor) (node.LogTail, error) {
	var t logTail
	err := r.post(ctx, r.path(id, "log"), tailReq{Log: log, From: &c}, &t)
	return t.tail(), err
}

// tailLog answers a TailLog or a FollowLog: this node's Node reads the log.
func (s *Server) tailLog(w http.ResponseWriter, r *http.Request, n node.Node) {
	var q tailReq
	if err := httperr.ReadJSON(w, r, maxErrBody, &q); err != nil {
		s.fail(w, err)
		return
	}
	var t node.LogTail
	var err error
	lt, tails := n.(node.LogTailer)
	lf, follows := n.(node.LogFollower)
	switch {
	case q.From == nil && tails:
		t, err = lt.TailLog(r.Context(), r.PathValue("id"), q.Log, q.Lines)
	case q.From != nil && follows:
		t, err = lf.FollowLog(r.Context(), r.PathValue("id"), q.Log, *q.From)
	default:
		s.fail(w, errors.Join(errors.New("node "+s.Name+" cannot read replica logs"), errdefs.ErrUnavailable))
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, toLogTail(t))
}
