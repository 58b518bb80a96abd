package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"html/template"
	"log/slog"
	"net/http"
)

// CookieName is the cookie that keeps a browser signed in.
const CookieName = "shoal_ui"

// auth admits a request that carries the bearer token, or the cookie that
// a request with ?token= set. The cookie holds an HMAC of the token, so it
// opens this page and nothing else: the TCP API still wants the token.
// Without a token nothing is admitted.
type auth struct {
	bearer []byte
	cookie string
}

func newAuth(token string) auth {
	if token == "" {
		return auth{}
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("shoal dashboard session"))
	return auth{bearer: []byte("Bearer " + token), cookie: hex.EncodeToString(mac.Sum(nil))}
}

func (a auth) ok(r *http.Request) bool {
	if a.bearer == nil {
		return false
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), a.bearer) == 1 {
		return true
	}
	c, err := r.Cookie(CookieName)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(a.cookie)) == 1
}

// tokenOK reports whether t is the token.
func (a auth) tokenOK(t string) bool {
	return a.bearer != nil && subtle.ConstantTimeCompare([]byte("Bearer "+t), a.bearer) == 1
}

func (a auth) wrap(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Has("token") {
			if !a.tokenOK(q.Get("token")) {
				log.Warn("dashboard: refused a wrong token", "remote", r.RemoteAddr)
				refuse(w, "The token in the address is not this daemon's.")
				return
			}
			http.SetCookie(w, &http.Cookie{Name: CookieName, Value: a.cookie, Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode})
			// The token leaves the address bar and the history.
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			w.Header().Set("Referrer-Policy", "no-referrer")
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if !a.ok(r) {
			refuse(w, "")
			return
		}
		h.ServeHTTP(w, r)
	})
}

var refusedPage = template.Must(template.New("refused").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>shoal: sign in</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
<h1>shoal dashboard</h1>
{{if .}}<p><strong>{{.}}</strong></p>{{end}}
<p>This page needs the daemon's API token, the one <code>--api-tcp</code> takes:
the file given with <code>--token-file</code>, else <code>$SHOAL_TOKEN</code>,
else <code>&lt;data-dir&gt;/api-token</code>.</p>
<p>Open this address once with <code>?token=TOKEN</code> appended: the
browser then keeps a cookie and the token leaves the address.</p>
</body></html>
`))

func refuse(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusUnauthorized)
	refusedPage.Execute(w, why)
}
