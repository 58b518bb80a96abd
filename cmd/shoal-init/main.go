// Command shoal-init is the process of a warm job sandbox: created before
// its job is known, it reads the step's command from stdin and execs it;
// with the argument "serve" it is the process of a sandbox reused from job
// to job, starting each step as such a stub (see internal/jobs/stub). The
// daemon finds it beside its own binary.
package main

import (
	"os"

	"github.com/shoal-run/shoal/internal/jobs/stub"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == stub.ServeArg {
		os.Exit(stub.Serve())
	}
	os.Exit(stub.Main())
}
