package acme

import (
	"context"
	"crypto"
	"encoding/json"
	"fmt"

	"github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/certcrypto"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/secrets"
	"github.com/shoal-run/shoal/internal/store"
)

// sealApp and sealName bind the account key's sealing: no app is named
// "acme/" (app names have no '/'), so no secret can be moved onto it.
const (
	sealApp  = "acme/"
	sealName = "account"
)

// accountRecord is the ACME account as the store keeps it
// (store.ACMEAccountKey): its CA, contact, URL and key, sealed.
type accountRecord struct {
	CA    string         `json:"ca"`
	Email string         `json:"email,omitempty"`
	URL   string         `json:"url"`
	Key   secrets.Sealed `json:"key"`
}

// user is an account as lego sees it.
type user struct {
	email string
	reg   *acme.ExtendedAccount
	key   crypto.Signer
}

func (u *user) GetEmail() string                       { return u.email }
func (u *user) GetRegistration() *acme.ExtendedAccount { return u.reg }
func (u *user) GetPrivateKey() crypto.Signer           { return u.key }

// loadAccount reads the account kept for ca, or nil when there is none
// (or it is another CA's).
func loadAccount(ctx context.Context, st store.Store, key *secrets.Key, ca, email string) (*user, error) {
	kv, err := st.Get(ctx, store.ACMEAccountKey)
	if errdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("acme account: %w", err)
	}
	var r accountRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return nil, fmt.Errorf("acme account record: %w", err)
	}
	if r.CA != ca || r.URL == "" {
		return nil, nil
	}
	pemKey, err := key.Open(sealApp, sealName, r.Key)
	if err != nil {
		return nil, fmt.Errorf("acme account: %w", err)
	}
	signer, err := certcrypto.ParsePEMPrivateKey(pemKey)
	if err != nil {
		return nil, fmt.Errorf("acme account key: %w", err)
	}
	return &user{email: email, key: signer, reg: &acme.ExtendedAccount{Location: r.URL}}, nil
}

// newUser makes an account key, not yet registered.
func newUser(email string) (*user, error) {
	k, err := certcrypto.GeneratePrivateKey(certcrypto.EC256)
	if err != nil {
		return nil, fmt.Errorf("acme account key: %w", err)
	}
	return &user{email: email, key: k}, nil
}

// saveAccount keeps u, registered with ca, its key sealed.
func saveAccount(ctx context.Context, w store.Store, key *secrets.Key, ca string, u *user) error {
	sealed, err := key.Seal(sealApp, sealName, certcrypto.PEMEncode(u.key))
	if err != nil {
		return fmt.Errorf("acme account: %w", err)
	}
	b, err := json.Marshal(accountRecord{CA: ca, Email: u.email, URL: u.reg.Location, Key: sealed})
	if err != nil {
		return err
	}
	if _, err := w.Put(ctx, store.ACMEAccountKey, b); err != nil {
		return fmt.Errorf("acme account: %w", err)
	}
	return nil
}
