package jsonlimit

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	l := Limits{Depth: 3, Values: 6}
	for doc, want := range map[string]string{
		`{"a":{"b":[1]}}`:                      "",
		`{"a":{"b":[[1]]}}`:                    "depth",
		`[[[]]]`:                               "",
		`[[[[]]]]`:                             "depth",
		`[1,2,3,4,5]`:                          "",
		`[1,2,3,4,5,6]`:                        "values",
		`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5}`: "",
		`{"k":"[[[[{{{{\"]]]]","l":true,"m":null,"n":-1.5e+3}`: "",
		`["a","b","c","d","e"]`:                                "",
		`["a","b","c","d","e","f"]`:                            "values",
		`{"a":[{"b":1},{"c":2}]}`:                              "",
		`{"a":[{"b":1},{"c":2},{}]}`:                           "values",
		`[[[ {"a"`:                                             "depth",
		` "x" `:                                                "",
	} {
		err := Check([]byte(doc), l)
		var le *Error
		got := ""
		if errors.As(err, &le) {
			got = le.Limit
		} else if err != nil {
			t.Fatalf("%s: %v is no *Error", doc, err)
		}
		if got != want {
			t.Errorf("%s: %v, want a %q error", doc, err, want)
		}
	}
}

// Check counts what encoding/json decodes: the values of an arbitrary
// document and the depth of its deepest container.
func TestCheckCountsLikeDecoder(t *testing.T) {
	for _, doc := range []string{
		`{"a":[1,"x",{"b":null,"c":[true,false]}],"d":{"e":{}},"f":[[],[[]]]}`,
		`"\"\\"`,
		`[{"\"}":"]\\"}]`,
		"[1e3, -0.5, 2E-7]",
	} {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		values, depth := measure(v, 0)
		if err := Check([]byte(doc), Limits{Depth: depth, Values: values}); err != nil {
			t.Errorf("%s: %v at its own measure (%d values, depth %d)", doc, err, values, depth)
		}
		if err := Check([]byte(doc), Limits{Depth: depth, Values: values - 1}); err == nil {
			t.Errorf("%s: passes with %d values", doc, values-1)
		}
		if depth > 0 {
			if err := Check([]byte(doc), Limits{Depth: depth - 1, Values: values}); err == nil {
				t.Errorf("%s: passes at depth %d", doc, depth-1)
			}
		}
	}
}

func measure(v any, d int) (values, depth int) {
	values, depth = 1, d
	switch v := v.(type) {
	case []any:
		depth = d + 1
		for _, e := range v {
			n, dd := measure(e, d+1)
			values += n
			depth = max(depth, dd)
		}
	case map[string]any:
		depth = d + 1
		for _, e := range v {
			n, dd := measure(e, d+1)
			values += n
			depth = max(depth, dd)
		}
	}
	return values, depth
}

func FuzzCheck(f *testing.F) {
	f.Add([]byte(`{"a":[1,"x",{"b":null}]}`))
	f.Add([]byte(`[[["\\\""]]]`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		var v any
		if json.Unmarshal(doc, &v) != nil {
			Check(doc, Default)
			return
		}
		values, depth := measure(v, 0)
		err := Check(doc, Limits{Depth: depth, Values: values})
		if err != nil {
			t.Fatalf("%q: %v at its own measure (%d values, depth %d)", doc, err, values, depth)
		}
		if Check(doc, Limits{Depth: depth, Values: values - 1}) == nil {
			t.Fatalf("%q: passes with %d values", doc, values-1)
		}
	})
}

func BenchmarkCheck(b *testing.B) {
	doc := []byte(strings.Repeat(`{"a":"xxxxxxxx","b":[1,2,3]},`, 30000))
	doc = append(append([]byte("["), doc[:len(doc)-1]...), ']')
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		Check(doc, Limits{Depth: 32, Values: 1 << 30})
	}
}
