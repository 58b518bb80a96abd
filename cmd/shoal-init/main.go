// Command shoal-init is the process of a warm job sandbox: created before
// its job is known, it reads the step's command from stdin and execs it
// (see internal/jobs/stub). The daemon finds it beside its own binary.
package main

import (
	"os"

	"github.com/shoal-run/shoal/internal/jobs/stub"
)

func main() { os.Exit(stub.Main()) }
