package tlsfiles

import (
	"bytes"
	"encoding/binary"
	"net"
)

// h2Preface opens every cleartext HTTP/2 (h2c) connection: what a gRPC
// client with an http:// URL, or grpcurl -plaintext, sends first.
const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// PlaintextMessage is what a TLS listener answers a cleartext client with
// (HTTP/1.1: the standard library's 400 answer says the same).
const PlaintextMessage = "this listener serves TLS: call it with an https:// URL (and trust its CA: --ca-file, client.WithTLS)"

// guardListener answers a client that speaks cleartext HTTP/2 to a TLS
// listener with a SETTINGS frame and a GOAWAY (INADEQUATE_SECURITY) whose
// debug data is PlaintextMessage, which HTTP/2 clients show in their error,
// instead of a bare reset; TLS handshakes pass through untouched. (A
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
// preface; they are passed on as read. It is read by one goroutine at a
// time (the TLS handshake's, then the connection's).
type guardConn struct {
	net.Conn
	seen    int  // bytes of the preface matched so far
	decided bool // not the preface: pass everything on
}

func (c *guardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.decided || n == 0 {
		return n, err
	}
	m := min(n, len(h2Preface)-c.seen)
	if !bytes.Equal(p[:m], []byte(h2Preface[c.seen:c.seen+m])) {
		c.decided = true
		return n, err
	}
	c.seen += m
	if c.seen < len(h2Preface) {
		return n, err
	}
	// A cleartext HTTP/2 client: say why, then close.
	_, _ = c.Conn.Write(goAway(PlaintextMessage))
	c.Conn.Close()
	return 0, net.ErrClosed
}

// goAway is an empty SETTINGS frame (an HTTP/2 client expects one first)
// and a GOAWAY frame with error INADEQUATE_SECURITY and debug data msg.
func goAway(msg string) []byte {
	frame := func(typ byte, payload []byte) []byte {
		h := make([]byte, 9, 9+len(payload))
		h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		h[3] = typ
		return append(h, payload...) // flags 0, stream 0
	}
	payload := make([]byte, 8, 8+len(msg))
	binary.BigEndian.PutUint32(payload[4:], 0xc) // last stream 0; INADEQUATE_SECURITY
	payload = append(payload, msg...)
	return append(frame(0x4, nil), frame(0x7, payload)...)
}
