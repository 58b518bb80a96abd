package serving

import (
	"sync"

	"github.com/shoal-run/shoal/internal/appapi"
)

// mint gives a new replica its self API token when the self API is at
// url: the secret goes to its environment only, the hash to its record.
// The replica's app holds its lock.
func (x *tokenIndex) mint(r *replica, url string) {
	r.self.settled = make(chan struct{})
	if url == "" {
		return
	}
	tok, hash := appapi.NewToken()
	r.self.token, r.rec.TokenHash = tok, hash
	x.add(hash, r.rec.App, r.rec.ID)
}

// selfEnv is the self API's part of a replica's environment. The token is
// forgotten once it is in the container's spec.
func (r *replica) selfEnv(url string) []string {
	if r.self.token == "" {
		return nil
	}
	tok := r.self.token
	r.self.token = ""
	return []string{appapi.EnvURL + "=" + url, appapi.EnvToken + "=" + tok}
}

// tokenIndex finds the replica of a token hash. It also remembers the
// hashes of the last replicas gone, so that their tokens are told apart
// from forged ones.
type tokenIndex struct {
	mu   sync.Mutex
	live map[string]tokenRef
	gone map[string]tokenRef
	past []string // gone hashes, oldest first
}

type tokenRef struct{ app, id string }

const goneKept = 4096

func (x *tokenIndex) add(hash, app, id string) {
	if hash == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.live == nil {
		x.live, x.gone = map[string]tokenRef{}, map[string]tokenRef{}
	}
	x.live[hash] = tokenRef{app, id}
}

func (x *tokenIndex) forget(hash string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ref, ok := x.live[hash]
	if !ok {
		return
	}
	delete(x.live, hash)
	x.gone[hash] = ref
	x.past = append(x.past, hash)
	if len(x.past) > goneKept {
		delete(x.gone, x.past[0])
		x.past = x.past[1:]
	}
}
