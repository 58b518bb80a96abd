package node

import (
	"context"
	"io"
)

// StateMax bounds the state area a replica on another node leaves: what
// the leader fetches to merge.
const StateMax int64 = 1 << 30

// StateCarrier is a Node that can hand over the state area of a replica
// it ran for another node: the leader fetches it to merge, then the node
// drops it. area is relative to the node's apps folder (see relocate).
type StateCarrier interface {
	// FetchState writes the regular files of the area into dst, an empty
	// directory of this host.
	FetchState(ctx context.Context, id, area, dst string) error
	// DropState removes the area.
	DropState(ctx context.Context, id, area string) error
}

// StateSource is what a node serves of the state areas of replicas it ran
// for another node.
type StateSource interface {
	// SendState writes the area's regular files to w as a tar.
	SendState(ctx context.Context, id, area string, w io.Writer) error
	// DropState removes the area.
	DropState(ctx context.Context, id, area string) error
}
