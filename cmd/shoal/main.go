// Command shoal is the shoal daemon and CLI in one binary.
package main

import (
	"os"

	"github.com/shoal-run/shoal/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
