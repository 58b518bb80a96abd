package serving

import (
	"sync"

	"github.com/shoal-run/shoal/internal/appapi"
)

// mintToken gives a new replica its self API token: the secret goes to
// its environment only, the hash to its record. ctl.mu is held.
func (ctl *appCtl) mintToken(r *replica) {
	r.self.settled = make(chan struct{})
	if ctl.m.o.SelfURL == "" {
		return
	}
	tok, hash := appapi.NewToken()
	r.self.token, r.rec.TokenHash = tok, hash
	ctl.m.addToken(hash, ctl.name, r.rec.ID)
}

// selfEnv is the self API's part of a replica's environment. The token is
// forgotten once it is in the container's spec.
func (ctl *appCtl) selfEnv(r *replica) []string {
	if r.self.token == "" {
		return nil
	}
	tok := r.self.token
	r.self.token = ""
	return []string{appapi.EnvURL + "=" + ctl.m.o.SelfURL, appapi.EnvToken + "=" + tok}
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

func (m *Manager) addToken(hash, app, id string) {
	if hash == "" {
		return
	}
	x := &m.self
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.live == nil {
		x.live, x.gone = map[string]tokenRef{}, map[string]tokenRef{}
	}
	x.live[hash] = tokenRef{app, id}
}

func (m *Manager) forgetToken(hash string) {
	x := &m.self
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
