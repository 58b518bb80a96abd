package types

// Volume is an app's volume on the node that answers.
type Volume struct {
	App  string `json:"app"`
	Name string `json:"name"`
	// Path is where the app's replicas mount it ("" when no app of that
	// name declares it: the volume was kept when its app was removed).
	Path  string `json:"path,omitempty"`
	Kept  bool   `json:"kept"` // its app is gone or no longer declares it
	Bytes int64  `json:"bytes"`
	Files int    `json:"files"`
}

// PruneVolumes is the answer of POST /v1/volumes/{app}/prune: the
// volumes of the app it no longer used, removed.
type PruneVolumes struct {
	App     string   `json:"app"`
	Removed []string `json:"removed"`
}

// VolumePathStat is what a path in a volume is.
type VolumePathStat struct {
	Exists bool `json:"exists"`
	Dir    bool `json:"dir"`
	// UID and GID own it, as the app's container sees them.
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// VolumeTarError is the trailer of a volume's tar that carries an error
// met once the tar began: the answer is 200 and the tar cut short.
const VolumeTarError = "Shoal-Error"
