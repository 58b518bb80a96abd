// Package e2e holds end-to-end tests of the shoal binary: a real daemon on a
// temporary data dir, the real CLI, real containers on runc and real CNI
// networking. The tests need root.
package e2e
