// Package image is shoal's image store: content-addressed blobs in an OCI
// image layout, one read-only overlayfs snapshot per distinct layer, and the
// ways images get in: Build (one layer from a folder), Import (OCI layout
// folder or tar, docker-archive, plain rootfs tar) and Pull (an OCI registry).
//
// The store root is a valid OCI image layout that other tools (umoci,
// skopeo) read as is, plus the unpacked snapshots and a staging area:
//
//	<root>/
//	  oci-layout                 {"imageLayoutVersion":"1.0.0"}
//	  index.json                 one manifest descriptor per reference; the
//	                             annotation org.opencontainers.image.ref.name
//	                             holds the full "name:tag" (absent for an
//	                             image known only by digest)
//	  blobs/sha256/<hex>         manifests, configs and layers, verified
//	  snapshots/<diffid-hex>/    each layer unpacked once, overlayfs format:
//	                             whiteout = char device 0:0, opaque directory
//	                             = xattr trusted.overlay.opaque=y
//	  tmp/                       staging for work in progress, emptied at Open
//	  .lock                      flock held while a Store is open
//
// The root, blobs/, snapshots/ and tmp/ are mode 0700 (narrowed at Open if
// found wider): snapshots keep the modes their images give, setuid binaries
// included, so only root may walk into them.
//
// An image's overlay lowerdir is its Layers, top first (Layers itself is
// bottom first). Snapshots and blobs shared by images stay until no image
// uses them.
//
// Every write is a transaction: blobs and snapshots are staged under tmp/,
// each blob's digest and each layer's diff ID is checked, and only then are
// they renamed into place and index.json replaced atomically. Any error
// leaves the store as it was. Layer unpacking refuses entries that escape
// the snapshot (".." components, absolute names, symlinked parents leading
// out, hardlinks out or to nothing), device nodes (those under dev/ are
// skipped with a note in Image.Notes: the runtime makes /dev), and layers
// over the configured Limits; setuid bits and FIFOs are kept.
package image
