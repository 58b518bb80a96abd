package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/image"
)

// Images is this node's image store as the Fetcher uses it (an
// *image.Store).
type Images interface {
	Get(ctx context.Context, ref string) (image.Image, error)
	Pull(ctx context.Context, ref string, o image.PullOptions) (image.Image, error)
}

// Fetcher gets the image a replica needs, when this node lacks it, from
// another node's registry: the node the spec names first, then any other
// live node. The pull checks the manifest and every blob against its
// digest.
type Fetcher struct {
	Images Images
	Client *Client
	Self   string // this node's name
	// Nodes returns the live nodes to try after the one named; nil: only
	// that one.
	Nodes func(ctx context.Context) ([]string, error)
	Log   *slog.Logger

	mu sync.Mutex // one pull at a time: two starts of an app pull once
}

// Ensure returns once the image of manifest digest dgst is in this node's
// store, fetched from node from (or another live node) if it was not.
func (f *Fetcher) Ensure(ctx context.Context, dgst, from string) error {
	have := func() (bool, error) {
		_, err := f.Images.Get(ctx, dgst)
		if err == nil {
			return true, nil
		}
		if errdefs.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("image %s: %w", dgst, err)
	}
	if ok, err := have(); ok || err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ok, err := have(); ok || err != nil {
		return err
	}
	f.Client.init()
	var errs []error
	for _, n := range f.sources(ctx, from, &errs) {
		addr, err := f.Client.Addr(ctx, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pctx, release := f.Client.whileLive(ctx, n)
		img, err := f.Images.Pull(pctx, addr+"/shoal@"+dgst,
			image.PullOptions{Insecure: true, Token: f.Client.Secret, Transport: f.Client.HTTP.Transport})
		release()
		if err != nil {
			errs = append(errs, fmt.Errorf("from node %s: %w", n, err))
			continue
		}
		if img.Digest != dgst {
			return fmt.Errorf("image %s: node %s sent %s", dgst, n, img.Digest)
		}
		if f.Log != nil {
			f.Log.Info("image fetched from another node", "digest", dgst, "node", n)
		}
		return nil
	}
	if len(errs) == 0 {
		return fmt.Errorf("image %s: not on node %s, and no other node to fetch it from: %w", dgst, f.Self, errdefs.ErrNotFound)
	}
	return fmt.Errorf("image %s is not on node %s and could not be fetched: %w", dgst, f.Self, errors.Join(errs...))
}

// sources are the nodes to pull from, in order: from, then the live
// nodes, never this one.
func (f *Fetcher) sources(ctx context.Context, from string, errs *[]error) []string {
	var out []string
	seen := map[string]bool{f.Self: true, "": true}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	add(from)
	if f.Nodes != nil {
		nodes, err := f.Nodes(ctx)
		if err != nil {
			*errs = append(*errs, fmt.Errorf("live nodes: %w", err))
		}
		for _, n := range nodes {
			add(n)
		}
	}
	return out
}
