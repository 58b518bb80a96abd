package image

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/shoal-run/shoal/internal/errdefs"
	"github.com/shoal-run/shoal/internal/jsonlimit"
)

// Limits of an image's shape, whatever its source (pull, import, build).
const (
	// MaxLayers bounds an image's layers (checked on its manifest, before
	// any layer is fetched or unpacked); overlayfs stacks at most about
	// 500 lower directories, and real images have fewer than 128.
	MaxLayers = 128
	// MaxNameBytes and MaxNameParts bound a tar entry's name (and a hard
	// link's target): PATH_MAX, and directories 128 deep.
	MaxNameBytes = 4096
	MaxNameParts = 128
)

// metaLimits bound a manifest, index or config (and a docker-archive's
// manifest.json) before it is decoded; maxMetaBytes bounds its size.
var metaLimits = jsonlimit.Limits{Depth: 32, Values: 100_000}

// decodeMeta decodes an image's JSON metadata (what names it in errors)
// after measuring it against metaLimits.
func decodeMeta(b []byte, v any, what string) error {
	if err := jsonlimit.Check(b, metaLimits); err != nil {
		return errdefs.Invalid(what, "%v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errdefs.Invalid(what, "%v", err)
	}
	return nil
}

// checkLayerCount refuses an image of more than MaxLayers layers.
func checkLayerCount(n int, what string) error {
	if n > MaxLayers {
		return errdefs.Invalid(what, "%d layers, above the limit of %d", n, MaxLayers)
	}
	return nil
}

// checkNameShape refuses a tar entry name too long or too deep, before it
// is split or walked.
func checkNameShape(name string) error {
	if len(name) > MaxNameBytes {
		return fmt.Errorf("name of %d bytes, above the limit of %d", len(name), MaxNameBytes)
	}
	if n := strings.Count(name, "/") + 1; n > MaxNameParts {
		return fmt.Errorf("name of %d parts, above the limit of %d", n, MaxNameParts)
	}
	return nil
}

// shortName is name as an error quotes it: at most 256 bytes.
func shortName(name string) string {
	if len(name) > 256 {
		return name[:256] + "..."
	}
	return name
}
