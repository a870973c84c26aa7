package httpgate

import (
	"fmt"

	"github.com/spf13/pflag"
)

// Flags are a server's request memory settings (--request-memory and the
// per-tenant and per-connection bounds under it).
type Flags struct {
	RequestMemory              int64
	RequestMemoryPerTenant     int64
	RequestMemoryPerConnection int64
}

// DefaultFlags are the flags' defaults.
func DefaultFlags() Flags {
	return Flags{
		RequestMemory:              DefaultServerBytes,
		RequestMemoryPerTenant:     DefaultServerBytes / 4,
		RequestMemoryPerConnection: DefaultServerBytes / 4,
	}
}

// RegisterFlags registers the flags on fs.
func (f *Flags) RegisterFlags(fs *pflag.FlagSet) {
	fs.Int64Var(&f.RequestMemory, "request-memory", f.RequestMemory, "bytes the requests in flight may hold while they are read and decoded, over every caller (a request holds its body's size times 6, or times 10 for JSON, which decodes into more: about what it costs in RSS, GC headroom included); a request that finds no room is refused resource_exhausted with a retry delay, its body never read (over HTTP/2 at once; over HTTP/1.1 after waiting up to 5 s in arrival order). Brokers' own calls have a separate quarter of it; anonymous callers share a sixteenth")
	fs.Int64Var(&f.RequestMemoryPerTenant, "request-memory-per-tenant", f.RequestMemoryPerTenant, "the part of --request-memory one tenant's requests may hold at once (or one request alone, if larger), so that one tenant's backlog does not hold the others back")
	fs.Int64Var(&f.RequestMemoryPerConnection, "request-memory-per-connection", f.RequestMemoryPerConnection, "the part of --request-memory the requests of one connection may hold at once")
}

// Validate checks the flags.
func (f *Flags) Validate() error {
	switch {
	case f.RequestMemory < 1<<20:
		return fmt.Errorf("--request-memory must be at least 1 MiB; got %d", f.RequestMemory)
	case f.RequestMemoryPerTenant < 64<<10 || f.RequestMemoryPerTenant > f.RequestMemory:
		return fmt.Errorf("--request-memory-per-tenant must be between 64 KiB and --request-memory (%d); got %d", f.RequestMemory, f.RequestMemoryPerTenant)
	case f.RequestMemoryPerConnection < 64<<10 || f.RequestMemoryPerConnection > f.RequestMemory:
		return fmt.Errorf("--request-memory-per-connection must be between 64 KiB and --request-memory (%d); got %d", f.RequestMemory, f.RequestMemoryPerConnection)
	}
	return nil
}

// Config is the gate's configuration for a server whose largest request is
// maxRequestBytes.
func (f Flags) Config(maxRequestBytes int64) Config {
	c := Defaults(maxRequestBytes)
	c.ServerBytes = f.RequestMemory
	c.PrincipalBytes = f.RequestMemoryPerTenant
	c.ConnBytes = f.RequestMemoryPerConnection
	c.AnonymousBytes = f.RequestMemory / 16
	c.InternalBytes = f.RequestMemory / 4
	return c.withDefaults()
}
