package bench

import (
	"math"
	"testing"
	"time"
)

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func TestSummarize(t *testing.T) {
	tests := []struct {
		name    string
		in      []time.Duration
		want    Summary
		wantSD  float64 // ms
		checkSD bool
	}{
		{name: "empty", in: nil, want: Summary{}},
		{name: "one", in: []time.Duration{ms(5)},
			want: Summary{N: 1, Median: ms(5), P90: ms(5), P99: ms(5), Min: ms(5), Max: ms(5), Mean: ms(5)}},
		{name: "even count interpolates median", in: []time.Duration{ms(4), ms(1), ms(3), ms(2)},
			want:   Summary{N: 4, Median: ms(2.5), P90: ms(3.7), P99: ms(3.97), Min: ms(1), Max: ms(4), Mean: ms(2.5)},
			wantSD: 1.2909944, checkSD: true},
		{name: "odd count", in: []time.Duration{ms(10), ms(30), ms(20)},
			want:   Summary{N: 3, Median: ms(20), P90: ms(28), P99: ms(29.8), Min: ms(10), Max: ms(30), Mean: ms(20)},
			wantSD: 10, checkSD: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.in)
			sd := got.Stddev
			got.Stddev = 0
			if got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
			if tt.checkSD && math.Abs(float64(sd)/1e6-tt.wantSD) > 1e-3 {
				t.Errorf("stddev = %v ms, want %v", float64(sd)/1e6, tt.wantSD)
			}
		})
	}
}

func TestSummarizeLeavesInputUnsorted(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	Summarize(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Fatalf("input reordered: %v", in)
	}
}

func TestPercentileOfHundred(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, ms(float64(i)))
	}
	if got := Percentile(s, 99); got != ms(99.01) {
		t.Errorf("p99 = %v, want 99.01ms", got)
	}
	if got := Percentile(s, 50); got != ms(50.5) {
		t.Errorf("p50 = %v, want 50.5ms", got)
	}
}

func TestRatio(t *testing.T) {
	a := Summarize([]time.Duration{ms(26)})
	b := Summarize([]time.Duration{ms(20)})
	if r := Ratio(a, b); math.Abs(r-1.3) > 1e-9 {
		t.Errorf("Ratio = %v, want 1.3", r)
	}
	if r := Ratio(a, Summary{}); !math.IsNaN(r) {
		t.Errorf("Ratio with empty = %v, want NaN", r)
	}
	if got := FormatRatio(1.2345); got != "1.23×" {
		t.Errorf("FormatRatio = %q", got)
	}
	if got := FormatRatio(math.NaN()); got != "n/a" {
		t.Errorf("FormatRatio(NaN) = %q", got)
	}
}

func TestFormatMS(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0.000"},
		{450 * time.Microsecond, "0.450"},
		{ms(1.234), "1.23"},
		{ms(21.56), "21.6"},
		{ms(139.5), "140"},
		{ms(2500), "2500"},
	}
	for _, tt := range tests {
		if got := FormatMS(tt.in); got != tt.want {
			t.Errorf("FormatMS(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
