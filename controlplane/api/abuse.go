package api

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
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

// ClientAddressHeader names, in a call a broker makes with the broker
// credential on behalf of its own client (the Kafka listener's SASL PLAIN
// exchanging an API key with CreateToken), that client's address: the
// per-address limits then count the client, not the broker, so that one
// client's bad keys cannot use up every client's attempts through that
// broker. The header is believed only with the broker credential.
const ClientAddressHeader = "Sluice-Client-Address"

// clientKey is the rate-limit bucket of a request's client address.
func (a *API) clientKey(req connect.AnyRequest) string {
	if v := req.Header().Get(ClientAddressHeader); v != "" && checkSharedSecret(req.Header(), a.cfg.BrokerToken, "broker") == nil {
		if addr, err := netip.ParseAddr(v); err == nil {
			return clientlimit.Key(addr.Unmap())
		}
	}
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

// keyChecks is CreateToken's bad-key limit: per client address, a token
// bucket of calls with a bad API key (clientlimit), of which only failed
// checks are spent.
//
// A call reserves one of its address's bad-key calls before its key is
// checked and gives it back when the key turns out good (or the check
// fails for another reason: a store error, a suspended tenant). Reserving
// first is what keeps the limit a limit on guesses. An address with none
// left is refused before its key is looked at, by an answer that does not
// depend on the key, so a guess cannot be tested while it waits. And a
// burst of N concurrent bad keys has at most the remaining allowance
// checked, the rest refused unchecked: checking first and charging
// failures afterwards would have answered all N guesses before counting
// the first. (Checking a key is cheap, a parse, one indexed lookup and a
// SHA-256, so the allowance is about guesses, not load.)
//
// A reservation held by a good key in flight is not a failure, though, so
// it must not refuse anyone: a call that finds every remaining bad-key call
// reserved by checks of its address still running waits for one of them
// to settle, instead of being refused (as before issue 29, which refused
// logins beyond 20 in flight from one address). A good key's settle hands
// its reservation to the next waiter; a bad key's lets the next waiter see
// that the allowance is spent. A call is refused only when its address has
// no bad-key call left and no check of its running: when the allowance went
// to bad keys. Waiters are served in order, one per settled check (not all
// woken at once), while their contexts last.
type keyChecks struct {
	limiter *clientlimit.Limiter
	now     func() time.Time

	mu    sync.Mutex
	addrs map[string]*addrChecks // addresses with a check running or waiting
}

// addrChecks is one address's checks in progress.
type addrChecks struct {
	running int             // checks holding a reservation
	waiting []chan struct{} // calls waiting for one, in order; each buffered, sent to when it is its turn
}

func newKeyChecks(l *clientlimit.Limiter, now func() time.Time) *keyChecks {
	return &keyChecks{limiter: l, now: now, addrs: map[string]*addrChecks{}}
}

// begin reserves a bad-key call of client for checking one key and returns
// settle, which the caller must call once with whether the key was bad.
// While client's remaining calls are all reserved by running checks it
// waits for one of them to settle. When client has no call left and no
// check running, settle is nil and retryAfter says when it will have one.
// err is ctx's, when ctx ends while it waits.
func (k *keyChecks) begin(ctx context.Context, client string) (settle func(bad bool), retryAfter time.Duration, err error) {
	if k.limiter.Limit().Off() {
		return func(bool) {}, 0, nil
	}
	var turn bool // woken from the queue: try before the others and keep its place
	for {
		k.mu.Lock()
		a := k.addrs[client]
		if a == nil {
			a = &addrChecks{}
			k.addrs[client] = a
		}
		if turn || len(a.waiting) == 0 {
			ok, wait := k.limiter.Take(client, k.now())
			if ok {
				a.running++
				if turn {
					k.wakeLocked(a) // calls refilled meanwhile serve the next in line too
				}
				k.mu.Unlock()
				return func(bad bool) { k.settle(client, a, bad) }, 0, nil
			}
			if a.running == 0 {
				// The allowance went to bad keys: refused, and so is every
				// call in line after this one (each wakes the next).
				k.wakeLocked(a)
				k.dropLocked(client, a)
				k.mu.Unlock()
				return nil, wait, nil
			}
		}
		ch := make(chan struct{}, 1)
		if turn {
			a.waiting = slices.Insert(a.waiting, 0, ch)
		} else {
			a.waiting = append(a.waiting, ch)
		}
		k.mu.Unlock()
		select {
		case <-ch:
			turn = true
		case <-ctx.Done():
			k.mu.Lock()
			if i := slices.Index(a.waiting, ch); i >= 0 {
				a.waiting = slices.Delete(a.waiting, i, i+1)
			} else {
				k.wakeLocked(a) // its turn came as ctx ended: pass it on
			}
			k.dropLocked(client, a)
			k.mu.Unlock()
			return nil, 0, fmt.Errorf("wait for the bad API key limit: %w", ctx.Err())
		}
	}
}

// settle ends a check of client begun on a: a good key's reservation is
// given back, a bad key's spent; either way the next waiter tries again.
func (k *keyChecks) settle(client string, a *addrChecks, bad bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !bad {
		k.limiter.Refund(client, k.now())
	}
	a.running--
	k.wakeLocked(a)
	k.dropLocked(client, a)
}

// wakeLocked gives the first waiter of a its turn.
func (k *keyChecks) wakeLocked(a *addrChecks) {
	if len(a.waiting) > 0 {
		a.waiting[0] <- struct{}{}
		a.waiting = a.waiting[1:]
	}
}

// dropLocked forgets a once nothing runs or waits on it. A waiter woken
// from it looks its address up again.
func (k *keyChecks) dropLocked(client string, a *addrChecks) {
	if a.running == 0 && len(a.waiting) == 0 && k.addrs[client] == a {
		delete(k.addrs, client)
	}
}
