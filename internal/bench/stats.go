package bench

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Summary describes a set of duration samples.
type Summary struct {
	N      int
	Median time.Duration
	P90    time.Duration
	P99    time.Duration
	Min    time.Duration
	Max    time.Duration
	Mean   time.Duration
	Stddev time.Duration
}

// Summarize computes the summary of samples. Percentiles use linear
// interpolation between the closest ranks, so the median of an even number of
// samples is the mean of the middle two. An empty slice gives a zero Summary.
func Summarize(samples []time.Duration) Summary {
	n := len(samples)
	if n == 0 {
		return Summary{}
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum float64
	for _, d := range s {
		sum += float64(d)
	}
	mean := sum / float64(n)
	var sq float64
	for _, d := range s {
		sq += (float64(d) - mean) * (float64(d) - mean)
	}
	var sd float64
	if n > 1 {
		sd = math.Sqrt(sq / float64(n-1))
	}
	return Summary{
		N:      n,
		Median: Percentile(s, 50),
		P90:    Percentile(s, 90),
		P99:    Percentile(s, 99),
		Min:    s[0],
		Max:    s[n-1],
		Mean:   time.Duration(math.Round(mean)),
		Stddev: time.Duration(math.Round(sd)),
	}
}

// Percentile returns the p-th percentile (0..100) of sorted samples, linearly
// interpolated between closest ranks. sorted must be in ascending order.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	rank := p / 100 * float64(n-1)
	lo := int(math.Floor(rank))
	hi := int(math.Ceil(rank))
	frac := rank - float64(lo)
	v := float64(sorted[lo]) + frac*(float64(sorted[hi])-float64(sorted[lo]))
	return time.Duration(math.Round(v))
}

// Ratio returns a.Median / b.Median, or NaN when either has no samples or b's
// median is zero.
func Ratio(a, b Summary) float64 {
	if a.N == 0 || b.N == 0 || b.Median == 0 {
		return math.NaN()
	}
	return float64(a.Median) / float64(b.Median)
}

// FormatMS formats d in milliseconds with precision that suits its size:
// three decimals below 1 ms, two below 10 ms, one below 100 ms, none above.
func FormatMS(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	a := math.Abs(ms)
	switch {
	case a < 1:
		return fmt.Sprintf("%.3f", ms)
	case a < 10:
		return fmt.Sprintf("%.2f", ms)
	case a < 100:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.0f", ms)
	}
}

// FormatRatio formats a ratio as "1.23×", or "n/a" when it is not a number.
func FormatRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", r)
}
