package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortBelowTheEphemeralRange: ports are bindable, never handed out
// twice, and below the range outgoing connections take local ports from.
func TestFreePortBelowTheEphemeralRange(t *testing.T) {
	lo, hi := belowEphemeral()
	seen := map[int]bool{}
	for range 200 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < lo || port >= hi {
			t.Fatalf("port %d outside %d..%d", port, lo, hi-1)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d is not free: %v", port, err)
	}
	ln.Close()
}
