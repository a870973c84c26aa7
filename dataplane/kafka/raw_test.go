package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// RawClient speaks the protocol over one connection, a request at a time,
// for the package's tests inside it and out (kafka_test): what a client
// library hides, as the exact version sent or a connection's muting.
type RawClient struct {
	NC   net.Conn
	corr int32
}

// DialRaw connects to addr; the connection closes when the test ends.
func DialRaw(t *testing.T, addr string) *RawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &RawClient{NC: nc}
}

// RoundTrip sends req at version and reads its answer (within 20 s: a
// muted connection answers after its throttle time).
func (c *RawClient) RoundTrip(version int16, req kmsg.Request) (kmsg.Response, error) {
	if _, err := c.Send(version, req); err != nil {
		return nil, err
	}
	res, _, err := c.Receive(version, req)
	return res, err
}

// Send sends req at version without waiting for its answer, and returns
// its correlation id.
func (c *RawClient) Send(version int16, req kmsg.Request) (int32, error) {
	req.SetVersion(version)
	c.corr++
	_, err := c.NC.Write(frameOf(req.Key(), version, c.corr, req.AppendTo(nil)))
	return c.corr, err
}

// Receive reads the next answer (within 20 s) as the answer to req at
// version, with its correlation id.
func (c *RawClient) Receive(version int16, req kmsg.Request) (kmsg.Response, int32, error) {
	_ = c.NC.SetReadDeadline(time.Now().Add(20 * time.Second))
	body, err := readFrame(c.NC, 1<<20)
	if err != nil {
		return nil, 0, err
	}
	if len(body) < 4 {
		return nil, 0, fmt.Errorf("answer of %d bytes", len(body))
	}
	corr := int32(binary.BigEndian.Uint32(body))
	res := req.ResponseKind()
	res.SetVersion(version)
	skip := 4
	if res.IsFlexible() && req.Key() != kmsg.ApiVersions.Int16() {
		skip = 5
	}
	return res, corr, res.ReadFrom(body[skip:])
}

// Closed waits up to 5 s for the server to close the connection, and
// reports whether it did (rather than answer something or time out).
func (c *RawClient) Closed() bool {
	_ = c.NC.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := c.NC.Read(b[:])
	return errors.Is(err, io.EOF)
}

// Login authenticates with SASL PLAIN.
func (c *RawClient) Login(user, pass string) error {
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "PLAIN"
	if _, err := c.RoundTrip(1, hs); err != nil {
		return err
	}
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SASLAuthBytes = []byte("\x00" + user + "\x00" + pass)
	res, err := c.RoundTrip(1, auth)
	if err != nil {
		return err
	}
	if code := res.(*kmsg.SASLAuthenticateResponse).ErrorCode; code != 0 {
		return fmt.Errorf("authentication: error %d", code)
	}
	return nil
}
