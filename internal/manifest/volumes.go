package manifest

import (
	"fmt"
	"math"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// VolumeOwner is who owns a volume's root directory, as ids in the app's
// container (its user namespace): the [volumes] keys uid and gid. -1 is
// left to the image's user.
type VolumeOwner struct {
	UID int64 `json:"uid"`
	GID int64 `json:"gid"`
}

// MaxVolumeID bounds uid and gid: the ids an app's user namespace has.
const MaxVolumeID = 65535

// decodeVolumes turns the [volumes] table as decoded (raw: name → a path,
// or a table with path, uid and gid) into c.Volumes and c.VolumeOwners.
// Errors name the key ("volumes.data.uid").
func (c *Config) decodeVolumes() error {
	raw := c.RawVolumes
	c.RawVolumes = nil
	if len(raw) == 0 {
		return nil
	}
	c.Volumes = make(map[string]string, len(raw))
	for _, name := range sortedKeys(raw) {
		key := "volumes." + name
		switch v := raw[name].(type) {
		case string:
			c.Volumes[name] = v
		case map[string]any:
			owner := VolumeOwner{UID: -1, GID: -1}
			path, hasPath := v["path"].(string)
			if _, ok := v["path"]; ok && !hasPath {
				return errdefs.Invalid(key+".path", "must be a string, the path in the container")
			}
			if !hasPath {
				return errdefs.Invalid(key+".path", "is required: the path in the container (data = { path = \"/data\", uid = 33 })")
			}
			for _, k := range sortedKeys(v) {
				switch k {
				case "path":
				case "uid", "gid":
					n, ok := v[k].(int64)
					if !ok || n < 0 || n > MaxVolumeID {
						return errdefs.Invalid(key+"."+k, "must be an integer 0-%d, an id in the app's container; found %s", MaxVolumeID, found(v[k]))
					}
					if k == "uid" {
						owner.UID = n
					} else {
						owner.GID = n
					}
				default:
					return errdefs.Invalid(key+"."+k, "unknown field (a volume has path, uid and gid)")
				}
			}
			if owner.GID < 0 && owner.UID >= 0 {
				owner.GID = owner.UID
			}
			c.Volumes[name] = path
			if owner.UID >= 0 || owner.GID >= 0 {
				if c.VolumeOwners == nil {
					c.VolumeOwners = map[string]VolumeOwner{}
				}
				c.VolumeOwners[name] = owner
			}
		default:
			return errdefs.Invalid(key, "must be a path (data = \"/data\") or a table (data = { path = \"/data\", uid = 33, gid = 33 }); found %s",
				found(raw[name]))
		}
	}
	return nil
}

// found names the TOML type of v for an error message.
func found(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64:
		return fmt.Sprint(v)
	case float64:
		if v == math.Trunc(v) {
			return fmt.Sprintf("%v (a float)", v)
		}
		return fmt.Sprint(v)
	case bool:
		return fmt.Sprint(v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	}
	return fmt.Sprintf("a value of type %T", v)
}

// validateOwners checks the owners of volumes against the volumes.
func validateOwners(vols map[string]string, owners map[string]VolumeOwner) error {
	for _, name := range sortedKeys(owners) {
		o := owners[name]
		key := "volumes." + name
		switch {
		case vols[name] == "":
			return errdefs.Invalid(key, "has an owner but is not a volume of the app")
		case o.UID < -1 || o.UID > MaxVolumeID:
			return errdefs.Invalid(key+".uid", "must be an integer 0-%d", MaxVolumeID)
		case o.GID < -1 || o.GID > MaxVolumeID:
			return errdefs.Invalid(key+".gid", "must be an integer 0-%d", MaxVolumeID)
		}
	}
	return nil
}

// Owner is who owns volume name's root: its uid and gid keys, -1 for
// what is left to the image's user.
func (c Config) Owner(name string) VolumeOwner {
	if o, ok := c.VolumeOwners[name]; ok {
		return o
	}
	return VolumeOwner{UID: -1, GID: -1}
}
