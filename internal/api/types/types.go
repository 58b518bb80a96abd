// Package types holds the JSON types the shoal CLI and daemon exchange over
// the v1 API, and the framing of a container's output stream. It is the wire
// format only: no HTTP, no service; the server is package api.
package types

import "time"

// Error is the JSON body of every failed request. Field names the input at
// fault (a flag, a JSON field, a header), or is empty.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// Health is the body of GET /v1/health.
type Health struct {
	Status     string   `json:"status"`
	Version    string   `json:"version"`
	Runtime    string   `json:"runtime"`
	CgroupMode string   `json:"cgroup_mode"`
	Store      string   `json:"store"`
	DataDir    string   `json:"data_dir"`
	Proxy      string   `json:"proxy,omitempty"`
	ProxyTLS   string   `json:"proxy_tls,omitempty"` // the proxy's HTTPS listener
	Containers int      `json:"containers"`
	Images     int      `json:"images"`
	Notes      []string `json:"notes,omitempty"`
}

// Image describes one image in the store.
type Image struct {
	Ref        string    `json:"ref"`
	Digest     string    `json:"digest"`
	ID         string    `json:"id"`
	Size       int64     `json:"size"`
	Created    time.Time `json:"created"`
	Layers     int       `json:"layers"`
	Entrypoint []string  `json:"entrypoint,omitempty"`
	Cmd        []string  `json:"cmd,omitempty"`
	Env        []string  `json:"env,omitempty"`
	WorkingDir string    `json:"working_dir,omitempty"`
	Ports      []string  `json:"ports,omitempty"`
	// Notes say what an import or pull left out of its input (device
	// nodes under dev/); only in the answer of that import or pull.
	Notes []string `json:"notes,omitempty"`
}

// BuildRequest is the body of POST /v1/images/build. Dir is a path on the
// daemon's host.
type BuildRequest struct {
	Dir        string   `json:"dir"`
	Tag        string   `json:"tag"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	Workdir    string   `json:"workdir,omitempty"`
	Ports      []int    `json:"ports,omitempty"`
}

// ImportRequest is the body of POST /v1/images/import. Path is on the
// daemon's host.
type ImportRequest struct {
	Path string `json:"path"`
	Tag  string `json:"tag,omitempty"`
}

// PullRequest is the body of POST /v1/images/pull.
type PullRequest struct {
	Ref      string `json:"ref"`
	Insecure bool   `json:"insecure,omitempty"`
	// Auth is what the registry is given (the CLI sends --creds, or what
	// its user's auth files hold for the registry); without it the daemon
	// reads its own host's auth files.
	Auth *RegistryAuth `json:"auth,omitempty"`
	// CA holds PEM certificates of authorities the registry's certificate
	// may be signed by (--ca-file), beside the daemon host's.
	CA string `json:"ca,omitempty"`
}

// RegistryAuth is a registry's credentials: a user and password, or a
// token (as auth.json and Docker's config.json hold them).
type RegistryAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identity_token,omitempty"`
	RegistryToken string `json:"registry_token,omitempty"`
}

// RunRequest is the body of POST /v1/containers/run.
type RunRequest struct {
	Image   string   `json:"image"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	Memory  string   `json:"memory,omitempty"`     // "64Mi", "1G", bytes
	CPUs    float64  `json:"cpus,omitempty"`       // fractional cores
	Shares  uint64   `json:"cpu_shares,omitempty"` // relative CPU weight (cgroup v1 shares, 2-262144)
	Pids    int64    `json:"pids,omitempty"`       // 0: default
	Network string   `json:"network,omitempty"`    // none (default) | bridge
	Timeout string   `json:"timeout,omitempty"`    // Go duration; "" or "0" none
	Remove  bool     `json:"rm,omitempty"`
}

// Exit is the last frame of a run stream.
type Exit struct {
	ID        string `json:"id"`
	Code      int    `json:"code"`
	Signal    string `json:"signal,omitempty"`
	OOMKilled bool   `json:"oom_killed,omitempty"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Container is one row of GET /v1/containers.
type Container struct {
	ID      string            `json:"id"`
	Image   string            `json:"image,omitempty"`
	Status  string            `json:"status"`
	Pid     int               `json:"pid,omitempty"`
	Created time.Time         `json:"created"`
	Command []string          `json:"command,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}
