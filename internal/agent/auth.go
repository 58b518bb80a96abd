package agent

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/shoal-run/shoal/internal/httperr"
)

// authorized reports whether r carries secret, as a bearer token or as the
// password of basic auth (how an OCI puller sends a registry token). The
// comparison takes the same time whatever the token: both sides are hashed
// first, so not even the secret's length shows.
func authorized(r *http.Request, secret string) bool {
	if secret == "" {
		return false
	}
	got := ""
	h := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
		got = tok
	} else if _, pass, ok := r.BasicAuth(); ok {
		got = pass
	}
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && got != ""
}

// guard lets through only requests that carry the cluster secret; any
// other is answered 401 before its handler sees it.
func guard(secret string, log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, secret) {
			log.Warn("agent: refused a request without the cluster secret", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Basic realm="shoal cluster"`)
			httperr.Write(w, http.StatusUnauthorized, errors.New("missing or wrong cluster secret"), "")
			return
		}
		h.ServeHTTP(w, r)
	})
}
