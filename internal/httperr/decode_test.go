package httperr

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoal-run/shoal/internal/errdefs"
)

func TestDecodeJSON(t *testing.T) {
	type req struct {
		Name  string `json:"name"`
		Inner struct {
			N int `json:"n"`
		} `json:"inner"`
	}
	for body, field := range map[string]string{
		`{"name":"x","extra":1}`:       "extra",
		`{"inner":{"n":"1"}}`:          "inner.n",
		`{"name":"x"} {"name":"y"}`:    "body",
		`{"name":"x"} trailing`:        "body",
		`[]`:                           "body",
		``:                             "body",
		`{"":1}`:                       "body",
		`{"name":"x"`:                  "body",
		`{"name":"x","inner":{"n":1}}`: "",
		" {\"name\":\"x\"} \n\t":       "",
	} {
		var v req
		err := DecodeJSON([]byte(body), &v)
		if got := errdefs.Field(err); got != field || (field != "" && (Status(err) != 400 || !errdefs.IsInvalid(err))) {
			t.Errorf("%q: error %v (field %q, status %d), want field %q", body, err, got, Status(err), field)
		}
	}
}

func TestReadJSONTooLarge(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/", strings.NewReader(`{"name":"`+strings.Repeat("x", 100)+`"}`))
	var v struct{ Name string }
	err := ReadJSON(w, r, 64, &v)
	if Status(err) != http.StatusRequestEntityTooLarge || errdefs.Field(err) != "body" || err.Error() != "body: the request body is above 64" {
		t.Fatalf("body over the limit: %v (status %d, field %q)", err, Status(err), errdefs.Field(err))
	}
}

// A body nested deeper than jsonlimit.Default or of more values is refused
// before it is decoded, naming the body.
func TestDecodeJSONLimits(t *testing.T) {
	for name, body := range map[string]string{
		"deep":   strings.Repeat("[", 33) + strings.Repeat("]", 33),
		"values": "[" + strings.Repeat("0,", 100_000) + "0]",
	} {
		var v any
		err := DecodeJSON([]byte(body), &v)
		if errdefs.Field(err) != "body" || Status(err) != 400 || !strings.Contains(err.Error(), "(the limit)") {
			t.Errorf("%s: %v, want a 400 naming the body and the limit", name, err)
		}
	}
	var v any
	if err := DecodeJSON([]byte(strings.Repeat("[", 32)+strings.Repeat("]", 32)), &v); err != nil {
		t.Errorf("32 levels: %v", err)
	}
}
