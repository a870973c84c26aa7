package broker

// Usage metering (dataplane/meter): the broker counts each tenant's egress
// (recordService.Fetch) and requests (admitCall, in the gate), derives ingress from
// the logs of the partitions it leads, and reports them to the control
// plane every --usage-report-interval (usageLoop) and once more on
// shutdown (Run).

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/meter"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// finalUsageReportTimeout bounds the last usage report on shutdown.
const finalUsageReportTimeout = 5 * time.Second

// newUsageReporter builds the broker's usage reporter, reporting through
// the control plane's BrokerService.
func (b *Broker) newUsageReporter() *meter.Reporter {
	return meter.NewReporter(meter.Config{
		BrokerID:    b.cfg.ID,
		BrokerEpoch: b.brokerEpoch.Load,
		Send: func(ctx context.Context, req *sluicev1.ReportUsageRequest) (*sluicev1.ReportUsageResponse, error) {
			res, err := b.cp.ReportUsage(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, connecterr.FromConnect(err)
			}
			return res.Msg, nil
		},
		ErrorLabel: connectCodeName,
		Leaders:    b.meteredLeaders,
		Counters:   b.usageCounters,
		Interval:   b.cfg.UsageReportInterval,
		Logger:     b.logger,
	})
}

// meteredLeaders lists the partitions of tenants' topics this broker's
// replicas lead at the epoch of the current view (internal topics are
// not metered).
func (b *Broker) meteredLeaders() []meter.Leader {
	meta := b.metadata()
	var out []meter.Leader
	for _, p := range b.partitions() {
		t, ok := meta.ByID[p.TopicID()]
		if !ok || t.TenantID == systemTenantID || int(p.Partition()) >= len(t.Partitions) {
			continue
		}
		pm := t.Partitions[p.Partition()]
		if pm.Leader != b.cfg.ID || !p.LeadsAt(pm.LeaderEpoch) {
			continue
		}
		out = append(out, meter.Leader{TopicID: t.ID, Partition: pm.Partition, LeaderEpoch: pm.LeaderEpoch, Replica: p})
	}
	return out
}

// finalUsageReport is the last try to report on shutdown, once the
// client port has drained.
func (b *Broker) finalUsageReport() {
	ctx, cancel := context.WithTimeout(context.Background(), min(finalUsageReportTimeout, b.cfg.ShutdownTimeout))
	defer cancel()
	b.usage.Final(ctx)
}

// forwardedHeader marks a request one broker sends another on behalf of
// its client, with the client's credential (forward, and the group and
// transaction calls that go to a coordinator elsewhere): the client's
// request was counted where it arrived, so the broker it is forwarded to
// does not count it again. Its value is an HMAC of the request's
// Authorization header keyed with the broker credential, so a tenant
// cannot set it to go uncounted.
const forwardedHeader = "Sluice-Forwarded"

func forwardMAC(brokerToken, authorization string) string {
	m := hmac.New(sha256.New, []byte(brokerToken))
	m.Write([]byte("sluice forwarded request\x00"))
	m.Write([]byte(authorization))
	return hex.EncodeToString(m.Sum(nil))
}

// forwardedByBroker reports whether h carries a broker's valid
// forwardedHeader.
func forwardedByBroker(h http.Header, brokerToken string) bool {
	v := h.Get(forwardedHeader)
	return v != "" && hmac.Equal([]byte(v), []byte(forwardMAC(brokerToken, h.Get("Authorization"))))
}

// forwardMarker is the client interceptor of the clients a broker calls
// other brokers' tenant services with: it sets forwardedHeader.
type forwardMarker struct{ brokerToken string }

func (m forwardMarker) mark(h http.Header) {
	if a := h.Get("Authorization"); a != "" {
		h.Set(forwardedHeader, forwardMAC(m.brokerToken, a))
	}
}

func (m forwardMarker) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			m.mark(req.Header())
		}
		return next(ctx, req)
	}
}

func (m forwardMarker) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		m.mark(conn.RequestHeader())
		return conn
	}
}

func (forwardMarker) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
