package cli

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/shoal-run/shoal/internal/api/types"
	"github.com/shoal-run/shoal/internal/units"
)

func init() { extraCommands = append(extraCommands, newVolumeCmd) }

func newVolumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "volume",
		Short: "List, copy into and out of, export, import and remove apps' volumes",
		Long: `An app's volumes live on the node that runs its replicas, under the daemon's
data dir; these commands act on the volumes of the daemon they talk to. A
volume is named APP:VOLUME, a path in it APP:VOLUME:/path. Removing an app
keeps its volumes (shoal app rm --volumes removes them); an app of the same
name deployed again mounts them again.`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(newVolumeLsCmd(g), newVolumeRmCmd(g), newVolumeCpCmd(g), newVolumeExportCmd(g), newVolumeImportCmd(g))
	return cmd
}

// volumeRef is APP:VOLUME or APP:VOLUME:/path.
type volumeRef struct{ app, name, path string }

func (v volumeRef) url(rest, p string) string {
	u := "/v1/volumes/" + url.PathEscape(v.app) + "/" + url.PathEscape(v.name) + rest
	if rest != "" {
		u += "?path=" + url.QueryEscape(p)
	}
	return u
}

// parseVolume reads APP:VOLUME (withPath false) or APP:VOLUME:/path.
func parseVolume(s string, withPath bool) (volumeRef, bool) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" || strings.Contains(parts[0], "/") {
		return volumeRef{}, false
	}
	v := volumeRef{app: parts[0], name: parts[1], path: "/"}
	if len(parts) == 3 {
		if !withPath || !strings.HasPrefix(parts[2], "/") {
			return volumeRef{}, false
		}
		v.path = parts[2]
	}
	return v, true
}

func newVolumeLsCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the volumes on this node: their app, path, whether kept, size",
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var vols []types.Volume
			if err := g.get(cmd, out, "/v1/volumes", &vols); err != nil {
				return err
			}
			if out == "json" {
				return printJSON(cmd.OutOrStdout(), vols)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "APP\tVOLUME\tPATH\tSTATE\tSIZE\tFILES")
			for _, v := range vols {
				state, p := "in use", v.Path
				if v.Kept {
					state, p = "kept", "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", v.App, v.Name, p, state, units.FormatBytes(v.Bytes), v.Files)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "table", "table or json")
	return cmd
}

func newVolumeRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm APP:VOLUME...",
		Aliases: []string{"remove"},
		Short:   "Remove volumes no app uses (their data is gone)",
		Example: `  shoal volume rm web:data`,
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var refs []volumeRef
			for _, a := range args {
				v, ok := parseVolume(a, false)
				if !ok {
					return usageErrorf("%q: name a volume as APP:VOLUME", a)
				}
				refs = append(refs, v)
			}
			for _, v := range refs {
				if err := g.call(cmd, "DELETE", v.url("", ""), nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s:%s\n", v.app, v.name)
			}
			return nil
		},
	}
}

func newVolumeExportCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "export APP:VOLUME [-o FILE]",
		Short: "Write a volume as a tar, to stdout or a file",
		Long: `Write a volume's files as a tar (owners as the app's container sees them), to
stdout or, with -o, to FILE, which is written only once the whole tar has come.`,
		Example: `  shoal volume export web:data -o data.tar
  shoal volume export web:data | tar -t`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, ok := parseVolume(args[0], false)
			if !ok {
				return usageErrorf("%q: name a volume as APP:VOLUME", args[0])
			}
			if file == "" || file == "-" {
				return g.download(cmd, v, cmd.OutOrStdout())
			}
			return writeAtomically(file, func(w io.Writer) error { return g.download(cmd, v, w) })
		},
	}
	cmd.Flags().StringVarP(&file, "output", "o", "", "the tar file to write (default: stdout)")
	return cmd
}

func newVolumeImportCmd(g *globals) *cobra.Command {
	var maxSize string
	cmd := &cobra.Command{
		Use:   "import APP:VOLUME [FILE|-]",
		Short: "Unpack a tar from a file or stdin into a volume",
		Long: `Unpack a tar (as export writes) into a volume: its files are added to the
volume's, replacing those of the same name; owners are kept, as ids in the
app's container. The daemon reads the whole tar before the volume changes, so
a bad or cut tar changes nothing, as does one whose files hold more than
--max-size (default 4GiB). A volume the app declares but that is not on this
node yet is made.`,
		Example: `  shoal volume import web:data data.tar
  tar -C site -c . | shoal volume import web:www -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErrorf("%s takes APP:VOLUME and an optional FILE, got %d argument(s)", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			v, ok := parseVolume(args[0], false)
			if !ok {
				return usageErrorf("%q: name a volume as APP:VOLUME", args[0])
			}
			u := v.url("/archive", "/")
			if maxSize != "" {
				n, err := units.ParseBytes(maxSize)
				if err != nil || n <= 0 {
					return usageErrorf("--max-size %q: a size such as 500MiB or 2GiB", maxSize)
				}
				u += "&max_bytes=" + strconv.FormatInt(n, 10)
			}
			var in io.Reader = cmd.InOrStdin()
			if len(args) == 2 && args[1] != "-" {
				f, err := os.Open(args[1])
				if err != nil {
					return usageErrorf("%s: cannot read: %v", args[1], unwrapPathErr(err))
				}
				defer f.Close()
				in = f
			}
			if err := g.call(cmd, "PUT", u, in, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "imported into %s:%s\n", v.app, v.name)
			return nil
		},
	}
	cmd.Flags().StringVar(&maxSize, "max-size", "", "refuse a tar whose files hold more than this (default 4GiB)")
	return cmd
}

func newVolumeCpCmd(g *globals) *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "cp SRC DEST",
		Short: "Copy files between this host and a volume (APP:VOLUME:/path), as docker cp",
		Long: `Copy a file or folder into a volume or out of one; one side is a local path,
the other APP:VOLUME:/path. As with docker cp: a folder that DEST names and that
is there receives SRC under its own name (SRC ending in /. copies its contents);
a DEST that is not there is made with SRC's content (its parent must be there).
Files copied in belong to the owner of the folder they go into (-a: keep the
local owners); files copied out belong to whoever runs the command. DEST "-"
writes a tar to stdout. Nothing is left half-copied on an error.`,
		Example: `  shoal volume cp ./site/. web:www:/
  shoal volume cp web:data:/db.sqlite ./backup.sqlite`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, srcVol := parseVolume(args[0], true)
			dst, dstVol := parseVolume(args[1], true)
			switch {
			case srcVol == dstVol:
				return usageErrorf("cp copies between a local path and APP:VOLUME:/path: give exactly one of each")
			case srcVol:
				return g.copyOut(cmd, src, args[0], args[1])
			default:
				return g.copyIn(cmd, args[0], dst, keep)
			}
		},
	}
	cmd.Flags().BoolVarP(&keep, "archive", "a", false, "keep the local owners (ids in the app's container)")
	return cmd
}

// download writes path v.path of a volume as a tar to w; an error the
// daemon met once the tar began comes in its trailer.
func (g *globals) download(cmd *cobra.Command, v volumeRef, w io.Writer) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	resp, err := c.send(cmd.Context(), "GET", v.url("/archive", v.path), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("%s:%s:%s: %w", v.app, v.name, v.path, err)
	}
	if e := resp.Trailer.Get(types.VolumeTarError); e != "" {
		return fmt.Errorf("%s:%s:%s: %s", v.app, v.name, v.path, e)
	}
	return nil
}

// writeAtomically writes file through a temporary file beside it, renamed
// into place once write succeeded.
func writeAtomically(file string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return usageErrorf("%s: cannot write: %v", file, unwrapPathErr(err))
	}
	defer os.Remove(f.Name())
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}

// copyIn copies local path srcArg into volume path dst.
func (g *globals) copyIn(cmd *cobra.Command, srcArg string, dst volumeRef, keep bool) error {
	fi, err := os.Lstat(srcArg)
	if err != nil {
		return usageErrorf("%s: cannot read: %v", srcArg, unwrapPathErr(err))
	}
	contents := fi.IsDir() && (strings.HasSuffix(srcArg, "/.") || srcArg == ".")
	var st types.VolumePathStat
	if err := g.call(cmd, "GET", dst.url("/stat", dst.path), nil, &st); err != nil {
		return err
	}
	dir, name := dst.path, filepath.Base(filepath.Clean(srcArg))
	switch {
	case st.Exists && st.Dir:
		if contents {
			name = ""
		}
	case st.Exists && fi.IsDir():
		return usageErrorf("%s is a file in the volume: cannot copy the folder %s onto it", dst.path, srcArg)
	case !st.Exists && strings.HasSuffix(dst.path, "/") && !fi.IsDir():
		return usageErrorf("folder %s is not in the volume", dst.path)
	default:
		dir, name = path.Dir(path.Clean(dst.path)), path.Base(path.Clean(dst.path))
	}
	var owner *types.VolumePathStat
	if !keep {
		if err := g.call(cmd, "GET", dst.url("/stat", dir), nil, &st); err != nil {
			return err
		}
		if !st.Exists || !st.Dir {
			return fmt.Errorf("folder %s is not in volume %s:%s", dir, dst.app, dst.name)
		}
		owner = &st
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarLocal(srcArg, name, owner, pw)) }()
	err = g.call(cmd, "PUT", dst.url("/archive", dir), pr, nil)
	pr.CloseWithError(errors.New("request ended"))
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "copied %s to %s:%s:%s\n", srcArg, dst.app, dst.name, path.Join(dir, name))
	return nil
}

// tarLocal writes local path src as a tar whose entries are named from
// name ("" : src's contents at the top), owned by owner (nil: the local
// owners).
func tarLocal(src, name string, owner *types.VolumePathStat, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		n := path.Join(name, filepath.ToSlash(rel))
		if n == "." || n == "" {
			return nil
		}
		var link string
		switch {
		case fi.Mode().IsRegular(), fi.IsDir():
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: only files, folders and symbolic links are copied", p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname = n, "", ""
		if owner != nil {
			h.Uid, h.Gid = owner.UID, owner.GID
		} else if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(tw, f, h.Size)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// copyOut copies volume path src to local path dstArg ("-": a tar to
// stdout), through a folder beside it, moved into place once all came.
func (g *globals) copyOut(cmd *cobra.Command, src volumeRef, srcArg, dstArg string) error {
	if dstArg == "-" {
		return g.download(cmd, src, cmd.OutOrStdout())
	}
	var st types.VolumePathStat
	if err := g.call(cmd, "GET", src.url("/stat", src.path), nil, &st); err != nil {
		return err
	}
	if !st.Exists {
		return fmt.Errorf("%s is not in volume %s:%s", src.path, src.app, src.name)
	}
	contents := st.Dir && (strings.HasSuffix(src.path, "/.") || path.Clean(src.path) == "/")
	dfi, derr := os.Stat(dstArg)
	var dir, name string
	switch {
	case derr == nil && dfi.IsDir():
		dir, name = dstArg, path.Base(path.Clean(src.path))
		if contents {
			name = ""
		}
	case derr == nil && st.Dir:
		return usageErrorf("%s is a file: cannot copy the folder %s onto it", dstArg, srcArg)
	case derr == nil || errors.Is(derr, fs.ErrNotExist):
		if strings.HasSuffix(dstArg, "/") {
			return usageErrorf("folder %s is not there", dstArg)
		}
		dir, name = filepath.Dir(filepath.Clean(dstArg)), filepath.Base(filepath.Clean(dstArg))
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return usageErrorf("folder %s is not there", dir)
		}
	default:
		return usageErrorf("%s: %v", dstArg, unwrapPathErr(derr))
	}
	stage, err := os.MkdirTemp(dir, ".shoal-cp-*")
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	defer os.RemoveAll(stage)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- untar(pr, stage, name, contents) }()
	err = g.download(cmd, src, pw)
	pw.CloseWithError(err)
	if uerr := <-done; err == nil {
		err = uerr
	}
	if err != nil {
		return err
	}
	if err := moveInto(stage, dir); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "copied %s to %s\n", srcArg, filepath.Join(dir, name))
	return nil
}

// untar unpacks the volume's tar r into stage: its first name component
// becomes name ("" with contents: dropped).
func untar(r io.Reader, stage, name string, contents bool) error {
	defer io.Copy(io.Discard, r)
	root, err := os.OpenRoot(stage)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the volume's tar: %w", err)
		}
		n := path.Clean(h.Name)
		first, rest, _ := strings.Cut(n, "/")
		if first == "." {
			first = ""
		}
		switch {
		case contents:
			n = rest
			if first == "" || strings.HasPrefix(h.Name, "./") {
				n = path.Clean(strings.TrimPrefix(h.Name, "./"))
			}
		default:
			n = path.Join(name, rest)
		}
		if n == "" || n == "." {
			continue
		}
		if !filepath.IsLocal(n) {
			return fmt.Errorf("the volume's tar names %q, out of the folder", h.Name)
		}
		if err := root.MkdirAll(path.Dir(n), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(h.Mode & 0o777)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(n, 0o755); err != nil {
				return err
			}
			root.Chmod(n, mode)
		case tar.TypeReg:
			f, err := root.OpenFile(n, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			root.Chmod(n, mode)
			root.Chtimes(n, h.ModTime, h.ModTime)
		case tar.TypeSymlink:
			if err := root.Symlink(h.Linkname, n); err != nil {
				return err
			}
		}
	}
}

// moveInto moves what is in stage into dir: a folder onto a folder merges
// into it, anything else takes the place of what has its name.
func moveInto(stage, dir string) error {
	ents, err := os.ReadDir(stage)
	if err != nil {
		return err
	}
	for _, e := range ents {
		src, dst := filepath.Join(stage, e.Name()), filepath.Join(dir, e.Name())
		if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
			if e.IsDir() {
				if err := moveInto(src, dst); err != nil {
					return err
				}
				continue
			}
			if err := os.RemoveAll(dst); err != nil {
				return err
			}
		}
		if err := os.Rename(src, dst); err != nil {
			return err
		}
	}
	return nil
}
