package api

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/controlplane/clientlimit"
)

// errSignupTaken is Signup's one answer for a taken tenant name and a taken
// email alike, so that signup cannot tell whether an email is registered
// (account enumeration). Both collide in the same INSERT, so neither takes
// longer to answer than the other.
func errSignupTaken() error {
	return connect.NewError(connect.CodeAlreadyExists,
		errors.New("this tenant name or email is already registered: choose another tenant name, or, if the account is yours, log in with its API key"))
}

// clientKey is the rate-limit bucket of a request's client address.
func (a *API) clientKey(req connect.AnyRequest) string {
	addr, _ := a.clients.ClientAddr(req.Peer().Addr, req.Header())
	return clientlimit.Key(addr)
}

// tooMany is ResourceExhausted for a client over a limit, with the retry
// delay as a google.rpc.RetryInfo detail (what gRPC clients honour) and in
// the message.
func tooMany(what string, retryAfter time.Duration) error {
	secs := max(time.Second, (retryAfter + time.Second - 1).Truncate(time.Second))
	err := connect.NewError(connect.CodeResourceExhausted,
		fmt.Errorf("too many %s from this client address; retry in %s", what, fmtDelay(secs)))
	if d, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

// fmtDelay writes whole seconds without zero tails: "10m", "1h", "1h30m", "45s".
func fmtDelay(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
