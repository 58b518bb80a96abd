package agent

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Blobs is this node's image store as its registry serves it: read only,
// by digest (an *image.Store).
type Blobs interface {
	Manifest(dgst string) ([]byte, string, error)
	OpenBlob(dgst string) (*os.File, error)
}

// RegistryPrefix is where a node serves its image store to the others.
const RegistryPrefix = "/v2/"

// Registry returns the node's image store as an OCI registry, read only,
// behind the cluster secret: GET and HEAD of /v2/, of
// /v2/<name>/manifests/<digest> and of /v2/<name>/blobs/<digest>. The
// name is not looked at (an image is its digest); a tag is not found.
func (s *Server) Registry() http.Handler {
	if s.Log == nil {
		s.Log = discard()
	}
	return guard(s.Secret, s.Log, http.HandlerFunc(s.registry))
}

func (s *Server) registry(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		regErr(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry is read only")
		return
	}
	if s.Blobs == nil {
		regErr(w, http.StatusServiceUnavailable, "UNAVAILABLE", "node "+s.Name+" serves no images")
		return
	}
	p := strings.TrimPrefix(r.URL.Path, RegistryPrefix)
	if p == "" {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}\n"))
		return
	}
	if i := strings.LastIndex(p, "/manifests/"); i > 0 {
		s.manifest(w, r, p[i+len("/manifests/"):])
		return
	}
	if i := strings.LastIndex(p, "/blobs/"); i > 0 {
		s.blob(w, r, p[i+len("/blobs/"):])
		return
	}
	regErr(w, http.StatusNotFound, "NAME_UNKNOWN", "no such route: "+r.URL.Path)
}

func (s *Server) manifest(w http.ResponseWriter, r *http.Request, ref string) {
	if !strings.HasPrefix(ref, "sha256:") {
		regErr(w, http.StatusNotFound, "MANIFEST_UNKNOWN", "images are served by digest only, not by tag "+ref)
		return
	}
	b, mt, err := s.Blobs.Manifest(ref)
	if err != nil {
		regFail(w, "MANIFEST_UNKNOWN", err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", mt)
	h.Set("Docker-Content-Digest", ref)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if r.Method == http.MethodGet {
		w.Write(b)
	}
}

func (s *Server) blob(w http.ResponseWriter, r *http.Request, dgst string) {
	f, err := s.Blobs.OpenBlob(dgst)
	if err != nil {
		regFail(w, "BLOB_UNKNOWN", err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Docker-Content-Digest", dgst)
	http.ServeContent(w, r, "", time.Time{}, f)
}

// regFail answers err in the registry's error format: not found with
// code, a bad digest 400, anything else 500.
func regFail(w http.ResponseWriter, code string, err error) {
	switch {
	case errdefs.IsNotFound(err):
		regErr(w, http.StatusNotFound, code, err.Error())
	case errdefs.IsInvalid(err):
		regErr(w, http.StatusBadRequest, "DIGEST_INVALID", err.Error())
	default:
		regErr(w, http.StatusInternalServerError, "UNKNOWN", err.Error())
	}
}

func regErr(w http.ResponseWriter, status int, code, msg string) {
	type entry struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Errors []entry `json:"errors"`
	}{[]entry{{code, msg}}})
}
