package manifest

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/shoal-run/shoal/internal/appapi"
	"github.com/shoal-run/shoal/internal/errdefs"
)

// SecretsDir is where a replica sees its secrets, one file each.
const SecretsDir = "/run/secrets"

// TokenSecret is the name of the replica's self API token among its
// secrets: the file /run/secrets/SHOAL_TOKEN, and $SHOAL_TOKEN unless
// [secrets] names it without env = true.
const TokenSecret = appapi.EnvToken

// MaxSecrets bounds the [secrets] table; MaxSecretName a secret's name.
const (
	MaxSecrets    = 64
	MaxSecretName = 64
)

// DefaultSecretMode is a secret file's mode when the manifest gives none.
const DefaultSecretMode = 0o400

var secretName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// CheckSecretName says why name cannot be a secret's (nil when it can):
// a file name of letters, digits, '_', '.' and '-', not starting with
// '.' or '-', at most MaxSecretName bytes, not one of shoal's (SHOAL_*,
// but SHOAL_TOKEN in a manifest).
func CheckSecretName(name string) error {
	if msg := secretNameProblem(name); msg != "" {
		return errdefs.Invalid("name", "%s", msg)
	}
	return nil
}

func secretNameProblem(name string) string {
	switch {
	case name == "":
		return "a secret's name is required"
	case len(name) > MaxSecretName || !secretName.MatchString(name):
		return fmt.Sprintf("secret name %q must be letters, digits, '_', '.' and '-', not starting with '.' or '-', at most %d characters", name, MaxSecretName)
	case strings.HasPrefix(name, "SHOAL_"):
		return fmt.Sprintf("secret name %q is shoal's: names starting with SHOAL_ are reserved", name)
	}
	return ""
}

// Secret is an entry of the [secrets] table: a value set with `shoal
// secret set` (stored encrypted, never in the manifest) that each replica
// sees as the read-only file /run/secrets/NAME.
type Secret struct {
	// Env also puts the value in the replica's environment as $NAME.
	Env bool `toml:"env" json:",omitempty"`
	// Mode is the file's mode, octal ("0400" when empty).
	Mode string `toml:"mode" json:",omitempty"`
	// UID and GID own the file, as ids in the replica's container (0).
	UID int `toml:"uid" json:",omitempty"`
	GID int `toml:"gid" json:",omitempty"`
}

// FileMode is the secret file's permission bits. Validate has checked
// that Mode parses.
func (s Secret) FileMode() uint32 {
	if s.Mode == "" {
		return DefaultSecretMode
	}
	m, _ := strconv.ParseUint(s.Mode, 8, 32)
	return uint32(m)
}

// TokenInEnv reports whether the replica's self API token is in its
// environment as $SHOAL_TOKEN: unless [secrets] names SHOAL_TOKEN without
// env = true. The file /run/secrets/SHOAL_TOKEN is there either way.
func (c Config) TokenInEnv() bool {
	s, named := c.Secrets[TokenSecret]
	return !named || s.Env
}

// StoredSecrets are the names of the secrets a replica needs from the
// secret store (every name in [secrets] but SHOAL_TOKEN), sorted.
func (c Config) StoredSecrets() []string {
	var names []string
	for n := range c.Secrets {
		if n != TokenSecret {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// validateSecrets checks the [secrets] table against the environment and
// the paths the app mounts.
func (c *Config) validateSecrets() error {
	for _, name := range sortedKeys(c.Volumes) {
		if p := c.Volumes[name]; underAny(p, SecretsDir) {
			return errdefs.Invalid("volumes."+name, "%q is under %s, where a replica's secrets are", p, SecretsDir)
		}
	}
	if c.State.Dir != "" && underAny(c.State.Dir, SecretsDir) {
		return errdefs.Invalid("state.dir", "%q is under %s, where a replica's secrets are", c.State.Dir, SecretsDir)
	}
	if len(c.Secrets) > MaxSecrets {
		return errdefs.Invalid("secrets", "%d secrets; at most %d", len(c.Secrets), MaxSecrets)
	}
	names := make([]string, 0, len(c.Secrets))
	for n := range c.Secrets {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s := c.Secrets[n]
		key := "secrets." + n
		if n != TokenSecret {
			if msg := secretNameProblem(n); msg != "" {
				return errdefs.Invalid(key, "%s", msg)
			}
		}
		if s.Env {
			_, inEnv := c.Env[n]
			switch {
			case !envKey.MatchString(n):
				return errdefs.Invalid(key+".env", "secret %q cannot be a variable: its name must be an identifier (letters, digits and '_', not starting with a digit)", n)
			case n == "PORT":
				return errdefs.Invalid(key+".env", "PORT is set by shoal from port")
			case inEnv:
				return errdefs.Invalid(key+".env", "%q is also in [env]; a variable has one value", n)
			}
		}
		if s.Mode != "" {
			if m, err := strconv.ParseUint(s.Mode, 8, 32); err != nil || m > 0o777 {
				return errdefs.Invalid(key+".mode", "%q must be octal permission bits such as \"0400\" or \"0440\"", s.Mode)
			}
		}
		if s.UID < 0 || s.UID > 65535 {
			return errdefs.Invalid(key+".uid", "%d must be a user id in the container, 0-65535", s.UID)
		}
		if s.GID < 0 || s.GID > 65535 {
			return errdefs.Invalid(key+".gid", "%d must be a group id in the container, 0-65535", s.GID)
		}
	}
	return nil
}
