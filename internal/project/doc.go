// Package project holds checks that apply to the whole source tree rather
// than to one package, such as every package having a doc comment.
package project
