package types

import "time"

// Secret is what the API shows of an app's secret: its name, when it was
// last set and its size; never its value.
type Secret struct {
	Name    string    `json:"name"`
	Updated time.Time `json:"updated"`
	Size    int       `json:"size"`
}

// MaxSecretValue bounds a secret's value: the daemon refuses a larger one,
// and `shoal secret set` reads no more.
const MaxSecretValue = 512 << 10

// SecretRequest is the body of PUT /v1/apps/{name}/secrets/{secret}: the
// value (base64 in JSON), stored sealed.
type SecretRequest struct {
	Value []byte `json:"value"`
}
