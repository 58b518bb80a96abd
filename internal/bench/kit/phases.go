package kit

// Phase names used in results.
const (
	PhaseNet    = "net"    // network attachment (acquire) before create
	PhaseCreate = "create" // bundle, root file system and runtime create
	PhaseStart  = "start"  // runtime start until it returns
	PhaseExec   = "exec"   // from start's return until the command ends
	PhaseDelete = "delete" // runtime delete and clean-up
	PhaseTotal  = "total"  // the whole life, end to end
)
