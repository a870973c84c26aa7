package testcluster

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// ProxyMode is what a Proxy does with traffic.
type ProxyMode int

const (
	// Pass forwards traffic both ways.
	Pass ProxyMode = iota
	// Cut closes every open connection and every new one at once: the
	// peer sees connection resets and refusals.
	Cut
	// Blackhole holds every connection open and forwards nothing: the
	// peer sees a silent network and waits for its timeouts. Connections
	// that were open when the blackhole started are closed when it heals.
	Blackhole
	// DropResponses forwards what the dialer sends and drops what the
	// target answers: requests arrive and are served, and their answers
	// are lost (the lost acknowledgement). Connections open while it lasts
	// are closed when it ends, as with Blackhole.
	DropResponses
	// HoldRequests holds what the dialer sends, without losing it, and
	// forwards the target's answers: once the mode changes, the held
	// bytes go on to the target (a request delayed in the network, which
	// arrives late but whole). Nothing is closed.
	HoldRequests
)

func (m ProxyMode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	case DropResponses:
		return "drop-responses"
	case HoldRequests:
		return "hold-requests"
	}
	return "unknown"
}

// Proxy is a TCP fault proxy on loopback in front of one address (nats
// netProxy style). Put it between two parties by making one of them dial
// Addr instead of the target: a broker advertises its proxy's address so
// other brokers reach it through the proxy, and dials the control plane
// through another.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	moved *sync.Cond // on mu: broadcast when mode changes or the proxy closes
	mode  ProxyMode
	conns map[*proxyConn]struct{}
	done  bool
	wg    sync.WaitGroup
	// rate limits the bytes per second the proxy forwards, both ways and
	// all connections together (0: no limit); busyUntil is when the bytes
	// already let through have used up their share.
	rate      int64
	busyUntil time.Time
}

type proxyConn struct {
	client, server net.Conn
	once           sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.client.Close()
		if c.server != nil {
			c.server.Close()
		}
	})
}

// NewProxy listens on a free loopback port and forwards to target until
// the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.moved = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// setTarget points the proxy at a new address for new connections.
func (p *Proxy) setTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mode returns the current mode.
func (p *Proxy) Mode() ProxyMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches the proxy. Cut closes the open connections at once;
// leaving Blackhole closes the connections it held.
func (p *Proxy) SetMode(m ProxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.mode
	p.mode = m
	p.moved.Broadcast()
	if m == Cut || (prev == Blackhole && m != Blackhole) || (prev == DropResponses && m != DropResponses) {
		for c := range p.conns {
			c.close()
			delete(p.conns, c)
		}
	}
}

// SetRate limits the bytes per second the proxy forwards, in both
// directions and over all connections together, like a slow link; 0 lifts
// the limit. It applies to every chunk forwarded from then on.
func (p *Proxy) SetRate(bytesPerSec int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rate = max(bytesPerSec, 0)
}

// pace waits until n more bytes fit in the rate limit.
func (p *Proxy) pace(n int) {
	p.mu.Lock()
	if p.rate <= 0 {
		p.mu.Unlock()
		return
	}
	now := time.Now()
	start := now
	if p.busyUntil.After(now) {
		start = p.busyUntil
	}
	p.busyUntil = start.Add(time.Duration(float64(n) / float64(p.rate) * float64(time.Second)))
	wait := p.busyUntil.Sub(now)
	p.mu.Unlock()
	time.Sleep(wait) // the slow link itself, not synchronisation
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.done = true
	p.moved.Broadcast()
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		mode, done := p.mode, p.done
		if done || mode == Cut {
			p.mu.Unlock()
			conn.Close()
			continue
		}
		pc := &proxyConn{client: conn}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(pc) })
	}
}

// serve dials the target and pumps bytes both ways, each chunk only while
// the proxy passes traffic.
func (p *Proxy) serve(pc *proxyConn) {
	defer func() {
		pc.close()
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
	}()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if _, ok := p.conns[pc]; !ok || p.done {
		p.mu.Unlock()
		server.Close()
		return
	}
	pc.server = server
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(pc, server, pc.client, false) })
	wg.Go(func() { p.pump(pc, pc.client, server, true) })
	wg.Wait()
}

// pump copies src to dst; in Blackhole mode it reads and drops, and in
// DropResponses mode too when it carries the target's answers (response);
// in HoldRequests mode it waits with the dialer's bytes until the mode
// changes.
func (p *Proxy) pump(pc *proxyConn, dst, src net.Conn, response bool) {
	defer pc.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.mode == HoldRequests && !response && !p.done {
				p.moved.Wait()
			}
			mode := p.mode
			p.mu.Unlock()
			if mode == HoldRequests { // the answers pass
				mode = Pass
			}
			if mode == DropResponses {
				mode = Pass
				if response {
					mode = Blackhole
				}
			}
			switch mode {
			case Pass:
				p.pace(n)
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			case Cut:
				return
			case Blackhole: // drop
			}
		}
		if err != nil {
			return // EOF or a closed connection: pc.close ends the other direction too
		}
	}
}
