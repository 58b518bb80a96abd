package types

import "time"

// Secret is what the API shows of an app's secret: its name, when it was
// last set and its size; never its value.
type Secret struct {
	Name    string    `json:"name"`
	Updated time.Time `json:"updated"`
	Size    int       `json:"size"`
}

// SecretRequest is the body of PUT /v1/apps/{name}/secrets/{secret}: the
// value (base64 in JSON), stored sealed.
type SecretRequest struct {
	Value []byte `json:"value"`
}
