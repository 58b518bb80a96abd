package cluster

import "testing"

// TestPlaceWorkload places every replica of a small and a large workload:
// neither runs out of room, so the rate is of decisions that succeeded.
func TestPlaceWorkload(t *testing.T) {
	for _, w := range []placeWorkload{placeSmall, placeLarge} {
		v, err := w.run()
		if err != nil || !(v > 0) {
			t.Errorf("%+v: %v decisions/s, %v", w, v, err)
		}
	}
}
