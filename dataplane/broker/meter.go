package broker

// Usage metering (dataplane/meter): the broker counts each tenant's egress
// (records.Service.Fetch) and requests (Enforcer.AdmitCall, in the gate), derives ingress from
// the logs of the partitions it leads, and reports them to the control
// plane every --usage-report-interval (usageLoop) and once more on
// shutdown (Run).

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connectapi"
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
		ErrorLabel: connectapi.CodeName,
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
