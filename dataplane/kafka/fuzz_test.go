package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/tenants"
)

// refuseAll authenticates no one: the fuzzed connections stay before
// authentication, where anyone on the network can reach a listener.
type refuseAll struct{}

func (refuseAll) Tenant(context.Context, string) (tenants.Principal, error) {
	return tenants.Principal{}, tenants.ErrInvalidToken
}
func (refuseAll) Current(tenants.Principal) error { return nil }

func fuzzServer() *Server {
	return New(Deps{BrokerID: 1, ClusterID: "fuzz", Auth: refuseAll{},
		Exchange:        func(context.Context, string, string) (Token, error) { return Token{}, tenants.ErrInvalidToken },
		MaxRequestBytes: 1 << 20, IdleTimeout: 5 * time.Second})
}

// frameOf frames a request as a client sends it.
func frameOf(key, version int16, corr int32, body []byte) []byte {
	var b []byte
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 3)
	b = append(b, "fzz"...)
	r := kmsg.RequestForKey(key)
	r.SetVersion(version)
	if r.IsFlexible() {
		b = append(b, 0)
	}
	b = append(b, body...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// FuzzConnection writes arbitrary bytes to a fresh connection and closes
// its side: the server never panics, and ends the connection (never
// hangs) — whatever it answered before.
func FuzzConnection(f *testing.F) {
	api := kmsg.NewPtrApiVersionsRequest()
	api.SetVersion(3)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "PLAIN"
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SASLAuthBytes = []byte("\x00tenant\x00slk_bad")
	f.Add(frameOf(18, 3, 1, api.AppendTo(nil)))
	f.Add(frameOf(18, 99, 1, nil))
	f.Add(append(frameOf(17, 1, 1, hs.AppendTo(nil)), frameOf(36, 1, 2, auth.AppendTo(nil))...))
	f.Add(append(frameOf(17, 0, 1, hs.AppendTo(nil)), 0, 0, 0, 5, 0, 'a', 0, 'b', 'c'))
	f.Add(frameOf(3, 9, 1, nil))
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 2, 0, 18})
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, in []byte) {
		client, server := net.Pipe()
		c := &conn{s: s, nc: server, remote: "fuzz"}
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer c.close()
			c.serve(context.Background())
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		_, _ = client.Write(in)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not end after its client closed")
		}
	})
}

// FuzzRequest decodes arbitrary bytes as a request frame's body: the
// header parser and kmsg's decoders never panic.
func FuzzRequest(f *testing.F) {
	for _, k := range []int16{0, 1, 2, 3, 17, 18, 19, 22, 36} {
		r := kmsg.RequestForKey(k)
		v, _ := versions[k]
		f.Add(frameOf(k, v[1], 7, r.AppendTo(nil))[4:])
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		h, req, body, err := parseHeader(in)
		if err != nil || req == nil || !supported(h.key, h.version) {
			return
		}
		_ = req.ReadFrom(bytes.Clone(body))
	})
}

// TestRefusesBeforeAuthentication: a request other than ApiVersions and
// SASL before authentication closes the connection without an answer.
func TestRefusesBeforeAuthentication(t *testing.T) {
	client, server := net.Pipe()
	c := &conn{s: fuzzServer(), nc: server, remote: "test"}
	go func() {
		defer c.close()
		c.serve(context.Background())
	}()
	defer client.Close()
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	go func() { _, _ = client.Write(frameOf(3, 9, 1, md.AppendTo(nil))) }()
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after a Metadata request before authentication: %v, want the connection closed", err)
	}
}
