package api

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/httperr"
)

// Jobs is what the API needs of the job service. Submit validates and
// queues every request or none; Wait blocks until the job has finished or
// ctx ends; Run is Submit of one job and Wait for it, whose caller hears
// of the job only from its end (the service may store less before then).
type Jobs interface {
	Submit(ctx context.Context, reqs []types.JobRequest) ([]types.Job, error)
	Run(ctx context.Context, req types.JobRequest) (types.Job, error)
	Get(ctx context.Context, id string) (types.Job, error)
	Wait(ctx context.Context, id string) (types.Job, error)
	List(ctx context.Context, f types.JobFilter) ([]types.Job, error)
	Cancel(ctx context.Context, id string) (types.Job, error)
}

func (s *Server) registerJobs(mux *http.ServeMux) {
	if s.Jobs == nil {
		return
	}
	mux.HandleFunc("POST /v1/jobs", s.submitJobs)
	mux.HandleFunc("GET /v1/jobs", s.listJobs)
	mux.HandleFunc("GET /v1/jobs/{id}", s.getJob)
	mux.HandleFunc("POST /v1/jobs/{id}/cancel", s.cancelJob)
}

func (s *Server) jobFail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, types.ErrQuota) {
		httperr.Write(w, http.StatusTooManyRequests, err, "tenant")
		return
	}
	s.fail(w, r, err)
}

func (s *Server) submitJobs(w http.ResponseWriter, r *http.Request) {
	wait, err := boolParam(r, "wait")
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	body, err := httperr.ReadBody(w, r, types.MaxJobBody)
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	batch := bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("["))
	var reqs []types.JobRequest
	var derr error
	if batch {
		derr = httperr.DecodeJSON(body, &reqs)
	} else {
		var one types.JobRequest
		derr = httperr.DecodeJSON(body, &one)
		reqs = []types.JobRequest{one}
	}
	if derr != nil {
		s.jobFail(w, r, derr)
		return
	}
	if wait && !batch {
		j, err := s.Jobs.Run(r.Context(), reqs[0])
		if err != nil {
			s.jobFail(w, r, err)
			return
		}
		httperr.WriteJSON(w, http.StatusOK, j)
		return
	}
	jobs, err := s.Jobs.Submit(r.Context(), reqs)
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	code := http.StatusAccepted
	if wait {
		for i := range jobs {
			j, err := s.Jobs.Wait(r.Context(), jobs[i].ID)
			if err != nil {
				s.jobFail(w, r, err)
				return
			}
			jobs[i] = j
		}
		code = http.StatusOK
	}
	if batch {
		httperr.WriteJSON(w, code, jobs)
		return
	}
	httperr.WriteJSON(w, code, jobs[0])
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	wait, err := boolParam(r, "wait")
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	var j types.Job
	if wait {
		j, err = s.Jobs.Wait(r.Context(), r.PathValue("id"))
	} else {
		j, err = s.Jobs.Get(r.Context(), r.PathValue("id"))
	}
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, j)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := types.JobFilter{Tenant: q.Get("tenant"), State: q.Get("state")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			s.jobFail(w, r, errdefs.Invalid("limit", "%q is not a count", l))
			return
		}
		f.Limit = n
	}
	jobs, err := s.Jobs.List(r.Context(), f)
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, jobs)
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.Jobs.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		s.jobFail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, j)
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Invalid(name, "%q is not true or false", v)
	}
	return b, nil
}
