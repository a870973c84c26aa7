// Package layering holds no code: its test checks the dependency rules of
// the tree (see the rules in layering_test.go), so that `make test` and
// `make lint` fail when a package reaches across the architecture.
package layering
