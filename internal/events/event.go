package events

import (
	"time"

	"github.com/shoal-run/shoal/internal/api/types"
)

// Event is one entry of the log as stored under store.EventKey(Seq): a
// scaling decision or a replica's change of state, with the reason and the
// inputs behind it. Its JSON is the stored format: a field keeps its name,
// so that every event a daemon wrote still decodes. The API shows it as a
// types.Event (Wire).
type Event struct {
	Seq     int64              `json:"seq"`
	Time    time.Time          `json:"time"`
	Kind    string             `json:"kind"`
	App     string             `json:"app,omitempty"`
	Replica string             `json:"replica,omitempty"`
	Reason  string             `json:"reason"`
	Inputs  map[string]float64 `json:"inputs,omitempty"`
}

// Wire returns e as the API shows it.
func (e Event) Wire() types.Event { return types.Event(e) }

// FromWire returns the record of an event given in the API's type.
func FromWire(e types.Event) Event { return Event(e) }
