package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
	"github.com/shoal-run/shoal/internal/node"
)

// maxSpecBody bounds a replica spec sent to a node.
const maxSpecBody = 4 << 20

// DefaultWaitPoll is how long a node holds a Wait before it answers that
// the replica still runs.
const DefaultWaitPoll = 25 * time.Second

// replicaRoutes mounts the node.Node of this node: each route is one
// call of it, made with the request's context.
func (s *Server) replicaRoutes(mux *http.ServeMux) {
	p := "POST " + Prefix + "replicas/"
	mux.HandleFunc(p+"start", s.withNode(s.start))
	mux.HandleFunc(p+"adopt", s.withNode(s.adopt))
	mux.HandleFunc(p+"{id}/freeze", s.withNode(s.freeze))
	mux.HandleFunc(p+"{id}/thaw", s.withNode(func(w http.ResponseWriter, r *http.Request, n node.Node) {
		s.done(w, n.Thaw(r.Context(), r.PathValue("id")))
	}))
	mux.HandleFunc(p+"{id}/drain", s.withNode(s.drain))
	mux.HandleFunc(p+"{id}/stop", s.withNode(s.stop))
	mux.HandleFunc(p+"{id}/wait", s.withNode(s.wait))
	mux.HandleFunc(p+"{id}/check", s.withNode(s.check))
	mux.HandleFunc(p+"{id}/usage", s.withNode(s.usage))
	mux.HandleFunc(p+"{id}/cpu", s.withNode(s.setCPU))
	mux.HandleFunc(p+"{id}/log", s.withNode(s.tailLog))
	mux.HandleFunc(p+"{id}/state", s.withNode(s.sendState))
	mux.HandleFunc(p+"{id}/state/drop", s.withNode(s.dropState))
	mux.HandleFunc(p+"{id}/remove", s.withNode(func(w http.ResponseWriter, r *http.Request, n node.Node) {
		s.done(w, n.Remove(r.Context(), r.PathValue("id")))
	}))
	mux.HandleFunc(p+"{id}/release", s.withNode(func(w http.ResponseWriter, r *http.Request, n node.Node) {
		s.done(w, n.Release(r.Context(), r.PathValue("id")))
	}))
}

// withNode answers 503 while this node has no node.Node to call.
func (s *Server) withNode(h func(http.ResponseWriter, *http.Request, node.Node)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.Node == nil {
			httperr.WriteErr(w, errors.Join(errors.New("node "+s.Name+" runs no replicas yet"), errdefs.ErrUnavailable))
			return
		}
		h(w, r, s.Node)
	}
}

// done answers err, or 204.
func (s *Server) done(w http.ResponseWriter, err error) {
	if err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	if httperr.Status(err) >= 500 {
		s.Log.Warn("agent: call failed", "node", s.Name, "err", err)
	}
	httperr.WriteErr(w, err)
}

func (s *Server) start(w http.ResponseWriter, r *http.Request, n node.Node) {
	var ws replicaSpec
	if err := httperr.ReadJSON(w, r, maxSpecBody, &ws); err != nil {
		s.fail(w, err)
		return
	}
	spec := ws.spec()
	if s.Fetch != nil && spec.Digest != "" {
		if err := s.Fetch.Ensure(r.Context(), spec.Digest, spec.ImageFrom); err != nil {
			s.fail(w, fmt.Errorf("replica %s: %w", spec.ID, err))
			return
		}
	}
	st, err := n.Start(r.Context(), spec)
	if err != nil {
		s.fail(w, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, toStarted(st))
}

func (s *Server) adopt(w http.ResponseWriter, r *http.Request, n node.Node) {
	var k known
	if err := httperr.ReadJSON(w, r, maxSpecBody, &k); err != nil {
		s.fail(w, err)
		return
	}
	a, err := n.Adopt(r.Context(), k.known())
	if err != nil {
		s.fail(w, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, toAdopted(a))
}

func (s *Server) freeze(w http.ResponseWriter, r *http.Request, n node.Node) {
	mem, err := n.Freeze(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, freezeResp{Memory: mem})
}

func (s *Server) drain(w http.ResponseWriter, r *http.Request, n node.Node) {
	var g graceReq
	if err := httperr.ReadJSON(w, r, maxErrBody, &g); err != nil {
		s.fail(w, err)
		return
	}
	s.done(w, n.Drain(r.Context(), r.PathValue("id"), g.Grace))
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request, n node.Node) {
	var g graceReq
	if err := httperr.ReadJSON(w, r, maxErrBody, &g); err != nil {
		s.fail(w, err)
		return
	}
	s.done(w, n.Stop(r.Context(), r.PathValue("id"), g.Grace))
}

// wait is a long poll: it holds the request until the replica exits or
// the poll's time is up, then answers which.
func (s *Server) wait(w http.ResponseWriter, r *http.Request, n node.Node) {
	poll := s.WaitPoll
	if poll <= 0 {
		poll = DefaultWaitPoll
	}
	ctx, cancel := context.WithTimeout(r.Context(), poll)
	defer cancel()
	st, err := n.Wait(ctx, r.PathValue("id"))
	switch {
	case err == nil:
		httperr.WriteJSON(w, http.StatusOK, waitResp{Exited: true, Status: toExit(st)})
	case ctx.Err() != nil && r.Context().Err() == nil:
		httperr.WriteJSON(w, http.StatusOK, waitResp{})
	default:
		s.fail(w, err)
	}
}

func (s *Server) check(w http.ResponseWriter, r *http.Request, n node.Node) {
	var c checkReq
	if err := httperr.ReadJSON(w, r, maxErrBody, &c); err != nil {
		s.fail(w, err)
		return
	}
	s.done(w, n.Check(r.Context(), r.PathValue("id"), c.Addr, c.Health))
}

func (s *Server) usage(w http.ResponseWriter, r *http.Request, n node.Node) {
	u, err := n.Usage(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, usageResp{Periods: u.Periods, Throttled: u.Throttled, UsedNs: int64(u.Used), StalledNs: int64(u.Stalled), Pressure: u.Pressure})
}

func (s *Server) setCPU(w http.ResponseWriter, r *http.Request, n node.Node) {
	var c cpuReq
	if err := httperr.ReadJSON(w, r, maxErrBody, &c); err != nil {
		s.fail(w, err)
		return
	}
	s.done(w, n.SetCPU(r.Context(), r.PathValue("id"), c.CPUs))
}
