package tlsfiles

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"time"
)

// h2Preface opens every cleartext HTTP/2 (h2c) connection: what a gRPC
// client with an http:// URL, or grpcurl -plaintext, sends first.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// PlaintextMessage is what a TLS listener answers a cleartext client with
// (HTTP/1.1: the standard library's 400 answer says the same).
const PlaintextMessage = "this listener serves TLS: call it with an https:// URL (and trust its CA: --ca-file, client.WithTLS)"

// guardListener answers a client that speaks cleartext HTTP/2 to a TLS
// listener with a GOAWAY (INADEQUATE_SECURITY) whose debug data is
// PlaintextMessage, which HTTP/2 clients show in their error, instead of a
// bare reset; TLS handshakes pass through untouched. (A
// cleartext HTTP/1.1 request is answered by net/http itself: "Client sent
// an HTTP request to an HTTPS server.")
type guardListener struct{ net.Listener }

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: c}, nil
}

// guardConn watches the first bytes a client sends for the HTTP/2
// preface, holding them back while they could still be its start (a
// TLS ClientHello's first byte already is not), then passes them on. It is
// read by one goroutine at a time (the TLS handshake's, then the
// connection's).
type guardConn struct {
	net.Conn
	decided bool   // not the preface: pass everything on
	pending []byte // read, not yet passed on
	err     error  // the read error after pending
}

func (c *guardConn) Read(p []byte) (int, error) {
	if !c.decided {
		buf := make([]byte, 4096)
		for !c.decided {
			n, err := c.Conn.Read(buf)
			c.pending = append(c.pending, buf[:n]...)
			m := min(len(c.pending), len(h2Preface))
			switch {
			case !bytes.Equal(c.pending[:m], []byte(h2Preface[:m])):
				c.decided = true
			case m == len(h2Preface):
				c.refuse(c.pending[m:])
				return 0, net.ErrClosed
			case err != nil:
				c.decided, c.err = true, err
			}
		}
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}

// refuse answers a cleartext HTTP/2 client, of which rest are the bytes
// read after the preface, and closes the connection.
func (c *guardConn) refuse(rest []byte) {
	// A cleartext HTTP/2 client: send the server's SETTINGS (some clients
	// wait for them before their first request), read up to its first
	// request (a HEADERS frame), and answer with a GOAWAY that says why
	// and counts that request as received: clients then fail it with the
	// GOAWAY's debug data when the connection closes (Go's shows it, gRPC's
	// too), rather than retrying it elsewhere, or reporting a connection
	// that "could not be established". Then close. Closing with frames
	// unread would reset the connection, and the client could see the
	// reset before the GOAWAY: half-close first, then read what it sends
	// until it closes too (for a moment at most).
	_, _ = c.Conn.Write(frame(0x4, nil))
	_ = c.Conn.SetReadDeadline(time.Now().Add(drainFor))
	_, _ = c.Conn.Write(goAway(awaitHeaders(io.MultiReader(bytes.NewReader(rest), c.Conn)), PlaintextMessage))
	if tc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
		_ = c.Conn.SetReadDeadline(time.Now().Add(drainFor))
		_, _ = io.Copy(io.Discard, io.LimitReader(c.Conn, 1<<20))
	}
	c.Conn.Close()
}

// awaitHeaders reads HTTP/2 frames from r until a HEADERS frame, and
// returns its stream; 0 when r fails first (its deadline).
func awaitHeaders(r io.Reader) uint32 {
	var h [9]byte
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return 0
		}
		if h[3] == 0x1 { // HEADERS
			return binary.BigEndian.Uint32(h[5:]) &^ (1 << 31)
		}
		n := int64(h[0])<<16 | int64(h[1])<<8 | int64(h[2])
		if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return 0
		}
	}
}

// drainFor bounds how long a refused cleartext client is read from.
const drainFor = 2 * time.Second

// frame is an HTTP/2 frame of type typ on stream 0, without flags.
func frame(typ byte, payload []byte) []byte {
	h := make([]byte, 9, 9+len(payload))
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3] = typ
	return append(h, payload...)
}

// goAway is a GOAWAY frame with last stream last, error
// INADEQUATE_SECURITY and debug data msg.
func goAway(last uint32, msg string) []byte {
	payload := make([]byte, 8, 8+len(msg))
	binary.BigEndian.PutUint32(payload, last)
	binary.BigEndian.PutUint32(payload[4:], 0xc) // INADEQUATE_SECURITY
	return frame(0x7, append(payload, msg...))
}
