package api

import (
	"io"
	"net/http"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/httperr"
)

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.Images.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if imgs == nil {
		imgs = []types.Image{}
	}
	httperr.WriteJSON(w, http.StatusOK, imgs)
}

func (s *Server) getImage(w http.ResponseWriter, r *http.Request) {
	img, err := s.Images.Get(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusOK, img)
}

func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) {
	if err := s.Images.Remove(r.Context(), r.PathValue("ref")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) buildImage(w http.ResponseWriter, r *http.Request) {
	var req types.BuildRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	img, err := s.Images.Build(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusCreated, img)
}

func (s *Server) importImage(w http.ResponseWriter, r *http.Request) {
	var req types.ImportRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	imgs, err := s.Images.Import(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusCreated, imgs)
}

func (s *Server) pullImage(w http.ResponseWriter, r *http.Request) {
	var req types.PullRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	img, err := s.Images.Pull(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	httperr.WriteJSON(w, http.StatusCreated, img)
}

func (s *Server) runContainer(w http.ResponseWriter, r *http.Request) {
	var req types.RunRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	var fw *FrameWriter
	attach := func() (io.Writer, io.Writer) {
		w.Header().Set("Content-Type", types.StreamContentType)
		w.WriteHeader(http.StatusOK)
		fw = NewFrameWriter(w)
		return fw.Writer(types.FrameStdout), fw.Writer(types.FrameStderr)
	}
	exit, err := s.Containers.Run(r.Context(), req, attach)
	if fw == nil {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		s.fail(w, r, err)
		return
	}
	if err != nil {
		exit.Error = err.Error()
		if exit.Code == 0 {
			exit.Code = 125
		}
	}
	fw.WriteExit(exit)
}

func (s *Server) listContainers(w http.ResponseWriter, r *http.Request) {
	cs, err := s.Containers.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if cs == nil {
		cs = []types.Container{}
	}
	httperr.WriteJSON(w, http.StatusOK, cs)
}

func (s *Server) removeContainer(w http.ResponseWriter, r *http.Request) {
	if err := s.Containers.Remove(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
