package client

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// ErrQuotaExceeded: the tenant is over a limit that waiting does not fix
// (total storage, transactional ids, groups; a ResourceExhausted refusal
// without a retry delay). The call is not retried: the error comes as a
// *QuotaError saying which limit. A rate refusal (ResourceExhausted with a
// google.rpc.RetryInfo delay) is not this error: the client waits the
// delay and sends again.
var ErrQuotaExceeded = errors.New("quota exceeded")

// QuotaError is a refusal of a call for a limit retrying does not fix.
// errors.Is(err, ErrQuotaExceeded) matches it, and connect.CodeOf(err) is
// ResourceExhausted (it wraps the server's *connect.Error).
type QuotaError struct {
	// Subject is the google.rpc.QuotaFailure violation's subject
	// ("tenant:<id>"), when the server sent one.
	Subject string
	// Description names the limit ("max_total_storage_bytes", ...), from
	// the violation's description; empty when the server sent none.
	Description string
	// Err is the server's refusal.
	Err error
}

func (e *QuotaError) Error() string {
	if e.Description != "" {
		return fmt.Sprintf("%v (%s): %v", ErrQuotaExceeded, e.Description, e.Err)
	}
	return fmt.Sprintf("%v: %v", ErrQuotaExceeded, e.Err)
}

func (e *QuotaError) Unwrap() []error { return []error{ErrQuotaExceeded, e.Err} }

// throttleOf returns the delay a rate refusal asks for: err is
// ResourceExhausted with a google.rpc.RetryInfo detail.
func throttleOf(err error) (time.Duration, bool) {
	if err == nil || connect.CodeOf(err) != connect.CodeResourceExhausted {
		return 0, false
	}
	ri, ok := ErrorDetail[*errdetails.RetryInfo](err)
	if !ok {
		return 0, false
	}
	return max(ri.GetRetryDelay().AsDuration(), 0), true
}

// quotaError turns a ResourceExhausted refusal without a retry delay into
// a *QuotaError; other errors (rate refusals included) come back as they
// are.
func quotaError(err error) error {
	if err == nil || connect.CodeOf(err) != connect.CodeResourceExhausted || errors.Is(err, ErrQuotaExceeded) {
		return err
	}
	if _, ok := throttleOf(err); ok {
		return err
	}
	qe := &QuotaError{Err: err}
	if qf, ok := ErrorDetail[*errdetails.QuotaFailure](err); ok {
		var subj, desc []string
		for _, v := range qf.GetViolations() {
			if v.GetSubject() != "" {
				subj = append(subj, v.GetSubject())
			}
			if v.GetDescription() != "" {
				desc = append(desc, v.GetDescription())
			}
		}
		qe.Subject, qe.Description = strings.Join(subj, ", "), strings.Join(desc, ", ")
	}
	return qe
}

// jitterUp is d plus up to a hundredth of it: never less than d. The
// broker already staggers the delays of the requests it refuses together
// (dataplane/quota), so the jitter only keeps clients told the same delay
// by different brokers apart; each hundredth more is that much of the
// rate a throttled client leaves unused (with a tenth: 5 % on average).
func jitterUp(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + rand.N(d/100+1)
}

// retryWait is how long to wait before sending again after err, the
// attempt-th failure in a row: the delay a rate refusal asks for, jittered
// up a little (never sooner); otherwise backoff(attempt).
func retryWait(err error, attempt int) time.Duration {
	if d, ok := throttleOf(err); ok {
		return jitterUp(d)
	}
	return backoff(attempt)
}

// throttled reports whether err is a rate refusal. Retry loops with an
// attempt budget do not count those: throttling slows a client down, it
// does not fail it.
func throttled(err error) bool {
	_, ok := throttleOf(err)
	return ok
}

// RequestKind is a kind of request the client sends, as Stats counts
// them.
type RequestKind string

// The kinds of requests in Stats.
const (
	KindProduce        RequestKind = "produce"          // Produce, ProduceMany
	KindFetch          RequestKind = "fetch"            // Fetch
	KindListOffsets    RequestKind = "list_offsets"     // ListOffsets
	KindMetadata       RequestKind = "metadata"         // GetMetadata
	KindInitProducerID RequestKind = "init_producer_id" // InitProducerId
	KindGroup          RequestKind = "group"            // every GroupService call: heartbeats, commits, ...
	KindTransaction    RequestKind = "transaction"      // every TransactionService call
	KindOther          RequestKind = "other"
)

// kindOf is the kind of a call by its procedure ("/sluice.v1.RecordService/Fetch").
func kindOf(procedure string) RequestKind {
	svc, method, _ := strings.Cut(strings.TrimPrefix(procedure, "/"), "/")
	switch {
	case strings.HasSuffix(svc, ".GroupService"):
		return KindGroup
	case strings.HasSuffix(svc, ".TransactionService"):
		return KindTransaction
	case !strings.HasSuffix(svc, ".RecordService"):
		return KindOther
	}
	switch method {
	case "Produce", "ProduceMany":
		return KindProduce
	case "Fetch":
		return KindFetch
	case "ListOffsets":
		return KindListOffsets
	case "GetMetadata":
		return KindMetadata
	case "InitProducerId":
		return KindInitProducerID
	}
	return KindOther
}

// ThrottleStats counts the rate refusals of one kind of request.
type ThrottleStats struct {
	// Requests is how many requests were refused with a retry delay.
	Requests int64
	// Time is the sum of the delays those refusals asked for; the client
	// waited at least that long before sending each again.
	Time time.Duration
}

// Stats is a snapshot of a client's counters, cumulative since New.
type Stats struct {
	// Throttle counts rate refusals (ResourceExhausted with a retry delay:
	// the tenant is over a produce, fetch or request rate quota) by kind
	// of request; kinds never throttled are absent.
	Throttle map[RequestKind]ThrottleStats
}

// ThrottleTotal sums Throttle over every kind.
func (s Stats) ThrottleTotal() ThrottleStats {
	var t ThrottleStats
	for _, k := range s.Throttle {
		t.Requests += k.Requests
		t.Time += k.Time
	}
	return t
}

// Stats returns the client's counters, over every producer and consumer
// made from it.
func (c *Client) Stats() Stats {
	return Stats{Throttle: c.throttle.snapshot()}
}

// throttleCounter is a Client's Stats.Throttle.
type throttleCounter struct {
	mu sync.Mutex
	by map[RequestKind]ThrottleStats
}

func (t *throttleCounter) add(k RequestKind, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.by == nil {
		t.by = map[RequestKind]ThrottleStats{}
	}
	s := t.by[k]
	s.Requests++
	s.Time += d
	t.by[k] = s
}

func (t *throttleCounter) snapshot() map[RequestKind]ThrottleStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[RequestKind]ThrottleStats, len(t.by))
	for k, v := range t.by {
		out[k] = v
	}
	return out
}

// observeQuota counts err when it is a rate refusal of a kind request and
// turns a refusal for a limit retrying does not fix into a *QuotaError.
func (c *Client) observeQuota(k RequestKind, err error) error {
	if d, ok := throttleOf(err); ok {
		c.throttle.add(k, d)
		return err
	}
	return quotaError(err)
}
