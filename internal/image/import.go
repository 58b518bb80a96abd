package image

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/shoal-run/shoal/internal/errdefs"
)

// Import reads the images in path: an OCI image layout (folder or tar), a
// docker-archive (the `docker save` format; its RepoTags name the images,
// Docker Hub names in docker's short form: "docker.io/library/app:1" is
// "app:1"; its uncompressed layers are stored gzipped) or a plain rootfs
// tar (tag required); tars may be gzip-compressed. tag, when set, names the one image the file holds. OCI
// layout entries are named by their org.opencontainers.image.ref.name
// annotation: a full "name:tag", or a bare tag combined with the file's base
// name ("app.tar" with ref "1.0" becomes "app:1.0"). Either every image is
// imported or none. A path that is missing, unreachable, or neither a
// regular file nor a folder is an errdefs.Invalid("path", ...).
func (s *Store) Import(ctx context.Context, p string, tag string) ([]Image, error) {
	if tag != "" {
		ref, err := normalizeRef(tag)
		if err != nil {
			return nil, err
		}
		tag = ref
	}
	imgs, err := s.importPath(ctx, p, tag)
	if err != nil {
		return nil, fmt.Errorf("import %q: %w", p, err)
	}
	return imgs, nil
}

func (s *Store) importPath(ctx context.Context, p, tag string) ([]Image, error) {
	fi, err := statInput("path", p)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil, errdefs.Invalid("path", "a %s is neither an image file nor a folder", fileKind(fi.Mode()))
	}
	in, err := s.newIngest()
	if err != nil {
		return nil, err
	}
	defer in.close()
	name := baseName(p)
	if fi.IsDir() {
		if err := in.importDir(ctx, p, name, tag); err != nil {
			return nil, inputErr("path", err)
		}
		return in.commit()
	}
	kind, err := sniffTar(p)
	if err != nil {
		return nil, err
	}
	if kind == "" {
		if tag == "" {
			return nil, errdefs.Invalid("tag", "a plain rootfs tar needs a tag")
		}
		if err := in.importRootfs(ctx, p, tag); err != nil {
			return nil, err
		}
		return in.commit()
	}
	dir := filepath.Join(in.dir, "archive")
	if err := extractArchive(ctx, p, dir, 8*s.limits.MaxLayerBytes, s.limits.MaxEntries); err != nil {
		return nil, err
	}
	if err := in.importDir(ctx, dir, name, tag); err != nil {
		return nil, err
	}
	return in.commit()
}

// importDir imports an OCI layout or docker-archive folder.
func (in *ingest) importDir(ctx context.Context, dir, name, tag string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	switch {
	case exists(root, "manifest.json"):
		err = in.importDockerArchive(ctx, root, tag)
	case exists(root, ocispec.ImageLayoutFile):
		err = in.importLayout(ctx, root, name, tag)
	default:
		err = errdefs.Invalid("path", "neither an OCI image layout (no oci-layout file) nor a docker-archive (no manifest.json)")
	}
	if err != nil {
		return err
	}
	if len(in.images) == 0 {
		return errdefs.Invalid("path", "holds no image")
	}
	if tag != "" && len(in.images) > 1 {
		return errdefs.Invalid("tag", "the archive holds %d images; a tag names exactly one", len(in.images))
	}
	return nil
}

func exists(root *os.Root, name string) bool {
	_, err := root.Stat(name)
	return err == nil
}

func readRootMeta(root *os.Root, name string) ([]byte, error) {
	f, err := openRegularIn("path", root, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readAllMax(f, maxMetaBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// copyLayoutBlob stages blob d from an OCI layout unless the store has it.
func (in *ingest) copyLayoutBlob(root *os.Root, d ocispec.Descriptor) error {
	if err := checkDigest(string(d.Digest)); err != nil {
		return err
	}
	if in.hasBlob(string(d.Digest)) {
		return nil
	}
	f, err := openRegularIn("path", root, path.Join("blobs", "sha256", d.Digest.Encoded()))
	if err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	defer f.Close()
	_, _, err = in.putBlob(f, string(d.Digest), d.Size, in.s.limits.MaxLayerBytes)
	return err
}

func (in *ingest) importLayout(ctx context.Context, root *os.Root, name, tag string) error {
	b, err := readRootMeta(root, ocispec.ImageIndexFile)
	if err != nil {
		return err
	}
	var idx ocispec.Index
	if err := decodeMeta(b, &idx, "index.json"); err != nil {
		return err
	}
	for _, d := range idx.Manifests {
		var refs []string
		switch refName := d.Annotations[ocispec.AnnotationRefName]; {
		case tag != "":
			refs = []string{tag}
		case refName == "":
		case strings.ContainsAny(refName, ":/"):
			ref, err := normalizeRef(refName)
			if err != nil {
				return fmt.Errorf("index.json: annotation %s: %w", ocispec.AnnotationRefName, err)
			}
			refs = []string{ref}
		default:
			ref, err := normalizeRef(name + ":" + refName)
			if err != nil {
				return fmt.Errorf("index.json: annotation %s: %w", ocispec.AnnotationRefName, err)
			}
			refs = []string{ref}
		}
		if d.MediaType == ocispec.MediaTypeImageIndex || d.MediaType == mediaTypeDockerList {
			if d, err = in.pickPlatform(root, d); err != nil {
				return err
			}
		}
		if err := in.copyLayoutBlob(root, d); err != nil {
			return err
		}
		mb, err := in.readMeta(string(d.Digest))
		if err != nil {
			return err
		}
		var m ocispec.Manifest
		if err := decodeMeta(mb, &m, "manifest"); err != nil {
			return fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		if err := checkLayerCount(len(m.Layers), "manifest"); err != nil {
			return fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		for _, bd := range append([]ocispec.Descriptor{m.Config}, m.Layers...) {
			if err := in.copyLayoutBlob(root, bd); err != nil {
				return fmt.Errorf("manifest %s: %w", d.Digest, err)
			}
		}
		if err := in.addImage(ctx, mb, d.MediaType, refs); err != nil {
			return err
		}
	}
	return nil
}

// pickPlatform chooses the manifest for this machine from an image index.
func (in *ingest) pickPlatform(root *os.Root, d ocispec.Descriptor) (ocispec.Descriptor, error) {
	if err := in.copyLayoutBlob(root, d); err != nil {
		return d, err
	}
	b, err := in.readMeta(string(d.Digest))
	if err != nil {
		return d, err
	}
	var idx ocispec.Index
	if err := decodeMeta(b, &idx, "index"); err != nil {
		return d, fmt.Errorf("index %s: %w", d.Digest, err)
	}
	for _, m := range idx.Manifests {
		if m.Platform != nil && m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
			return m, nil
		}
	}
	if len(idx.Manifests) == 1 {
		return idx.Manifests[0], nil
	}
	return d, fmt.Errorf("index %s: no manifest for linux/%s: %w", d.Digest, runtime.GOARCH, errdefs.ErrNotFound)
}

type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

func (in *ingest) importDockerArchive(ctx context.Context, root *os.Root, tag string) error {
	b, err := readRootMeta(root, "manifest.json")
	if err != nil {
		return err
	}
	var entries []dockerManifest
	if err := decodeMeta(b, &entries, "manifest.json"); err != nil {
		return err
	}
	for i, e := range entries {
		if err := in.importDockerEntry(ctx, root, e, tag); err != nil {
			return fmt.Errorf("manifest.json entry %d: %w", i, err)
		}
	}
	return nil
}

func (in *ingest) importDockerEntry(ctx context.Context, root *os.Root, e dockerManifest, tag string) error {
	var refs []string
	if tag != "" {
		refs = []string{tag}
	} else {
		for _, t := range e.RepoTags {
			ref, err := normalizeRef(dockerFamiliar(t))
			if err != nil {
				return fmt.Errorf("RepoTags: %w", err)
			}
			refs = append(refs, ref)
		}
	}
	if err := checkLayerCount(len(e.Layers), "Layers"); err != nil {
		return err
	}
	cb, err := readRootMeta(root, e.Config)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var layers []ocispec.Descriptor
	for _, l := range e.Layers {
		desc, err := in.putLayerFile(root, l)
		if err != nil {
			return fmt.Errorf("layer %q: %w", l, err)
		}
		layers = append(layers, desc)
	}
	return in.addConfigured(ctx, cb, layers, refs)
}

// dockerFamiliar writes a Docker Hub name the short way docker itself shows
// it ("docker.io/library/app:1" is "app:1"): skopeo's docker-archives spell
// RepoTags in full, docker save's in short.
func dockerFamiliar(t string) string {
	for _, hub := range []string{"docker.io/", "index.docker.io/"} {
		if rest, ok := strings.CutPrefix(t, hub); ok {
			return strings.TrimPrefix(rest, "library/")
		}
	}
	return t
}

// putLayerFile stages a docker-archive's layer file: a gzip one as is, an
// uncompressed one (docker save writes them so) gzipped, as a registry
// would hold it. The image's manifest is made anew, so its layers may
// change; their diff IDs do not.
func (in *ingest) putLayerFile(root *os.Root, name string) (ocispec.Descriptor, error) {
	f, err := openRegularIn("path", root, name)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return ocispec.Descriptor{}, errdefs.Invalid("layer", "zstd compression is not supported")
	case !bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		max := in.s.limits.MaxLayerBytes
		lr := &io.LimitedReader{R: br, N: max + 1}
		desc, diffID, err := in.putTarLayer(lr)
		if lr.N <= 0 {
			return ocispec.Descriptor{}, fmt.Errorf("layer exceeds the limit of %d uncompressed bytes", max)
		}
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		in.verified[string(desc.Digest)] = diffID
		return desc, nil
	}
	dgst, size, err := in.putBlob(br, "", -1, in.s.limits.MaxLayerBytes)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.Digest(dgst), Size: size}, nil
}

// importRootfs makes a one-layer image of a plain (maybe gzipped) rootfs tar.
func (in *ingest) importRootfs(ctx context.Context, p, tag string) error {
	r, closeFn, err := openMaybeGzip(p)
	if err != nil {
		return err
	}
	defer closeFn()
	layer, diffID, err := in.putTarLayer(r)
	if err != nil {
		return err
	}
	c := ocispec.ImageConfig{Env: []string{DefaultPath}}
	return in.addNewImage(ctx, c, []ocispec.Descriptor{layer}, []string{diffID}, []string{tag}, "shoal image import")
}

var nameCleanRE = lazyRegexp(`[^a-z0-9._-]+`)

// baseName derives an image name from a file or folder name.
func baseName(p string) string {
	b := strings.ToLower(filepath.Base(filepath.Clean(p)))
	for _, ext := range []string{".tar.gz", ".tgz", ".tar", ".oci"} {
		b = strings.TrimSuffix(b, ext)
	}
	b = strings.Trim(nameCleanRE().ReplaceAllString(b, "-"), "._-")
	if !componentRE().MatchString(b) {
		return "imported"
	}
	return b
}
