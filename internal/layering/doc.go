// Package layering holds no code: its test checks the dependency rules of
// the tree (see the rules in layering_test.go): which module packages a
// folder may depend on, and which outside packages it may import itself
// (below the Connect adapter, no data-plane package imports
// connectrpc.com/connect), so that `make test` and `make lint` fail when a
// package reaches across the architecture.
package layering
