package localnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shoal-run/shoal/internal/manifest"
	"github.com/shoal-run/shoal/internal/node"
	"github.com/shoal-run/shoal/internal/runtime"
)

// Secrets opens an app's secrets (the daemon's secrets.Store).
type Secrets interface {
	Open(ctx context.Context, app string, names []string) (map[string][]byte, error)
}

// secretsDir is where replica id's secrets are on the host: under the run
// dir, a tmpfs, so that no value reaches a disk (one asked for in the
// environment is in the runtime's spec, on the run dir's tmpfs too).
func (n *Node) secretsDir(id string) string { return filepath.Join(n.secretsRoot, id) }

// mountSecrets writes the secrets a replica sees, its self API token among
// them, into a directory of its own and adds it to spec read-only at
// /run/secrets; it takes $SHOAL_TOKEN out of the environment unless the
// manifest keeps it there. Remove deletes the directory.
func (n *Node) mountSecrets(ctx context.Context, s node.ReplicaSpec, spec *runtime.Spec) error {
	if n.secretsRoot == "" {
		return nil
	}
	cfg := s.Config
	values := map[string][]byte{}
	if names := cfg.StoredSecrets(); len(names) > 0 {
		if n.secrets == nil {
			return fmt.Errorf("secrets %s: this node keeps no secrets", strings.Join(names, ", "))
		}
		v, err := n.secrets.Open(ctx, s.App, names)
		if err != nil {
			return err
		}
		values = v
	}
	env := spec.Env[:0:0]
	for _, kv := range spec.Env {
		if tok, ok := strings.CutPrefix(kv, manifest.TokenSecret+"="); ok {
			values[manifest.TokenSecret] = []byte(tok)
			if !cfg.TokenInEnv() {
				continue
			}
		}
		env = append(env, kv)
	}
	for name, v := range values {
		if name != manifest.TokenSecret && cfg.Secrets[name].Env {
			env = append(env, name+"="+string(v))
		}
	}
	spec.Env = env
	var base uint32
	if spec.UserNS != nil {
		base = spec.UserNS.HostID
	}
	dir := n.secretsDir(s.ID)
	if err := os.MkdirAll(n.secretsRoot, 0o700); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	for name, v := range values {
		sc := cfg.Secrets[name]
		if err := writeSecret(filepath.Join(dir, name), v, sc.FileMode(), int(base)+sc.UID, int(base)+sc.GID); err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
	}
	if err := os.Chown(dir, int(base), int(base)); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	spec.Mounts = append(spec.Mounts, runtime.Mount{Source: dir, Destination: manifest.SecretsDir, ReadOnly: true,
		Options: []string{"nosuid", "nodev", "noexec"}})
	return nil
}

// writeSecret writes a secret's file, owned by uid:gid with mode, before
// any byte of it is written.
func writeSecret(path string, v []byte, mode uint32, uid, gid int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	err = f.Chown(uid, gid)
	if err == nil {
		err = f.Chmod(os.FileMode(mode))
	}
	if err == nil {
		_, err = f.Write(v)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// dropSecrets removes replica id's secrets.
func (n *Node) dropSecrets(id string) error {
	if n.secretsRoot == "" {
		return nil
	}
	return os.RemoveAll(n.secretsDir(id))
}

// RefreshSecrets writes the current value of app's secret name into the
// /run/secrets of each of the app's replicas on this node that has it
// (every secret of every replica for app ""), so a running replica reads
// a value set after it started. The file keeps its owner and mode and is
// replaced whole (a rename), so a reader sees the old value or the new.
// A secret removed from the store stays as it was.
func (n *Node) RefreshSecrets(ctx context.Context, app, name string) error {
	if n.secretsRoot == "" || n.secrets == nil {
		return nil
	}
	dirs, err := os.ReadDir(n.secretsRoot)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("secrets: %w", err)
	}
	var errs []error
	for _, d := range dirs {
		id := d.Name()
		// A replica is <app>-<8 hex>.
		if len(id) < 10 || id[len(id)-9] != '-' || (app != "" && id[:len(id)-9] != app) {
			continue
		}
		rapp := id[:len(id)-9]
		files, err := os.ReadDir(n.secretsDir(id))
		if err != nil {
			continue // removed meanwhile
		}
		for _, f := range files {
			fn := f.Name()
			if fn == manifest.TokenSecret || strings.HasPrefix(fn, ".") || (name != "" && fn != name) {
				continue
			}
			v, err := n.secrets.Open(ctx, rapp, []string{fn})
			if err != nil {
				continue // removed from the store: the replica keeps what it had
			}
			if err := replaceSecret(filepath.Join(n.secretsDir(id), fn), v[fn]); err != nil {
				errs = append(errs, fmt.Errorf("replica %s: secret %s: %w", id, fn, err))
			}
		}
	}
	return errors.Join(errs...)
}

// replaceSecret replaces the file at path by one holding v, with its
// owner and mode, unless it holds v already.
func replaceSecret(path string, v []byte) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("not a regular file")
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, v) {
		return nil
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("no owner")
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	os.Remove(tmp)
	if err := writeSecret(tmp, v, uint32(st.Mode().Perm()), int(sys.Uid), int(sys.Gid)); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
