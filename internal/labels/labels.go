// Package labels names the labels the daemon puts on its containers: what
// kind of container it is (a replica, a one-off run, a job's step, a merge
// hook) and what it runs. Serving, containers, the job sandbox and the
// daemon's recovery read and write them; their values are stored with each
// container record, so a key or kind keeps its spelling.
package labels

// Label keys.
const (
	Kind     = "shoal.kind"         // one of the kinds below
	Image    = "shoal.image"        // the image as asked for
	Digest   = "shoal.image.digest" // the image's manifest digest
	Command  = "shoal.command"      // a one-off container's command (JSON)
	App      = "shoal.app"          // a replica's or merge hook's app
	Revision = "shoal.revision"     // a replica's revision
	Replica  = "shoal.replica"      // the replica a merge hook merges
	Job      = "shoal.job"          // a job step's job id (a warm sandbox made ahead: its image)
)

// Kinds (the value of Kind).
const (
	KindReplica = "replica" // a replica serving starts
	KindMerge   = "merge"   // a hook merging a gone replica's state
	KindRun     = "run"     // a one-off container (`shoal run`)
	KindJob     = "job"     // a job's step or sandbox
)
