//go:build tools

// Package deps pins the modules shoal builds on until code imports them.
package deps

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/google/go-containerregistry/pkg/v1/layout"
	_ "github.com/google/go-containerregistry/pkg/v1/remote"
	_ "github.com/google/go-containerregistry/pkg/v1/tarball"
	_ "github.com/opencontainers/image-spec/specs-go/v1"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/bbolt"
	_ "go.etcd.io/etcd/client/v3"
	_ "golang.org/x/sys/unix"
)
