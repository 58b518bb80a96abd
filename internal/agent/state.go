package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/statemerge"
)

// stateReq names a replica's state area, a path relative to the node's
// apps folder.
type stateReq struct {
	Area string `json:"area"`
}

var _ node.StateCarrier = (*Remote)(nil)

// FetchState streams the regular files of the replica's state area on its
// node, as a tar, into dst (bounded by node.StateMax).
func (r *Remote) FetchState(ctx context.Context, id, area, dst string) error {
	b, _ := json.Marshal(stateReq{Area: area})
	req, err := http.NewRequest(http.MethodPost, "http://node"+Prefix+r.path(id, "state"), strings.NewReader(string(b)))
	if err != nil {
		return fmt.Errorf("node %s: replica %s: %w", r.node, id, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.c.Send(ctx, r.node, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return readErr(r.node, resp)
	}
	if _, err := statemerge.ReadTar(resp.Body, dst, node.StateMax); err != nil {
		return fmt.Errorf("node %s: replica %s: %w", r.node, id, err)
	}
	return nil
}

// DropState removes the replica's state area on its node.
func (r *Remote) DropState(ctx context.Context, id, area string) error {
	return r.post(ctx, r.path(id, "state/drop"), stateReq{Area: area}, nil)
}

// sendState answers a FetchState: this node's Node writes the tar. An
// error once the tar has begun cuts the stream, which the reader sees as
// a truncated tar.
func (s *Server) sendState(w http.ResponseWriter, r *http.Request, n node.Node) {
	var q stateReq
	if err := httperr.ReadJSON(w, r, maxErrBody, &q); err != nil {
		s.fail(w, err)
		return
	}
	src, ok := n.(node.StateSource)
	if !ok {
		s.fail(w, errors.Join(errors.New("node "+s.Name+" cannot send state areas"), errdefs.ErrUnavailable))
		return
	}
	cw := &countWriter{w: w}
	if err := src.SendState(r.Context(), r.PathValue("id"), q.Area, cw); err != nil {
		if cw.n == 0 {
			s.fail(w, err)
			return
		}
		s.Log.Warn("agent: send state", "node", s.Name, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// countWriter counts what was written through it.
type countWriter struct {
	w http.ResponseWriter
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	if c.n == 0 {
		c.w.Header().Set("Content-Type", "application/x-tar")
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// dropState answers a DropState.
func (s *Server) dropState(w http.ResponseWriter, r *http.Request, n node.Node) {
	var q stateReq
	if err := httperr.ReadJSON(w, r, maxErrBody, &q); err != nil {
		s.fail(w, err)
		return
	}
	src, ok := n.(node.StateSource)
	if !ok {
		s.fail(w, errors.Join(errors.New("node "+s.Name+" cannot drop state areas"), errdefs.ErrUnavailable))
		return
	}
	s.done(w, src.DropState(r.Context(), r.PathValue("id"), q.Area))
}
