package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// issued are the ports FreePort has handed out in this process, so two
// servers of one test binary never get the same one.
var issued struct {
	sync.Mutex
	m map[int]bool
}

// FreePort returns a loopback TCP port that was free a moment ago and was
// not returned before in this process. It lies below the kernel's
// ephemeral port range: a port from that range, freed when a test kills
// its server, can be taken by any outgoing connection as its local port
// before the server restarts on it (seen as "address already in use" on a
// broker's restart). Ports below the range are only ever bound on purpose.
func FreePort() (int, error) {
	issued.Lock()
	defer issued.Unlock()
	if issued.m == nil {
		issued.m = map[int]bool{}
	}
	lo, hi := belowEphemeral()
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if issued.m[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		ln.Close()
		issued.m[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("testenv: no free loopback port in %d..%d", lo, hi-1)
}

// belowEphemeral is the range of ports FreePort picks from, [lo, hi): up to
// 12,000 ports just below the ephemeral range the kernel hands to
// outgoing connections and to listeners on port 0.
func belowEphemeral() (lo, hi int) {
	hi = 32768 // Linux's default start of ip_local_port_range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				hi = v
			}
		}
	}
	return max(1024, hi-12000), hi
}
