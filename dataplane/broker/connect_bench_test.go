package broker

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// BenchmarkProduceConnect sends produce requests to the broker's real
// Connect handler over h2c on loopback, with a tenant token (verified from
// a JWKS served as the control plane serves it), through the whole
// interceptor chain: authentication, decoding, the produce path and the
// append (RF 1, flush os), and the client's own encoding and decoding.
func BenchmarkProduceConnect(b *testing.B) {
	iss := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"})
	k, err := tenants.GenerateSigningKey(time.Now().Add(-time.Minute))
	require.NoError(b, err)
	iss.SetKeys([]tenants.SigningKey{k})
	var protos http.Protocols // the broker speaks h2c to the control plane and to clients
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	jwks := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, err := iss.JWKS(time.Now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(doc)
	}))
	jwks.Config.Protocols = &protos
	jwks.Start()
	b.Cleanup(jwks.Close)
	tok, _, err := iss.Mint(time.Now(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: tenants.AllScopes()})
	require.NoError(b, err)

	cfg := DefaultConfig()
	cfg.ID = 1
	cfg.DataDir = b.TempDir()
	cfg.BrokerToken = "broker-token-0123456789"
	cfg.Flush = "os"
	cfg.ControlPlane = jwks.URL
	cfg.Issuer, cfg.Audience = "sluice", "sluice"
	br, err := New(cfg, Deps{})
	require.NoError(b, err)
	br.revoked.MarkLoaded()
	pm := cluster.Partition{Partition: 0, Replicas: []int32{1}, Leader: 1, LeaderEpoch: 1, ISR: []int32{1}}
	tm := &cluster.Topic{TenantID: "t1", ID: "topic-bench", Name: "bench", Config: cluster.TopicConfig{MinISR: 1, MaxMessageBytes: 1 << 20}, Partitions: []cluster.Partition{pm}}
	m := cluster.EmptyView()
	m.Loaded = true
	m.AddTopic(tm)
	br.meta.Store(m)
	p, err := br.replicas.Open(tm, pm)
	require.NoError(b, err)
	b.Cleanup(func() { p.Log().Close() })
	p.Update(b.Context(), pm.Assignment(), tm.Config.Replica())

	srv := httptest.NewUnstartedServer(br.handler)
	srv.Config.Protocols = &protos
	srv.Start()
	b.Cleanup(srv.Close)
	client := sluicev1connect.NewRecordServiceClient(h2c.Client(), srv.URL, connect.WithInterceptors(tenants.Bearer(tok)))

	batch, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, benchRecords(16, 1024))
	require.NoError(b, err)
	req := &sluicev1.ProduceRequest{Topic: "bench", Acks: sluicev1.Acks_ACKS_ALL, Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: batch}}}
	_, err = client.Produce(b.Context(), connect.NewRequest(req))
	require.NoError(b, err)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	cpu := cpuTime()
	defer reportCPU(b, cpu)
	for b.Loop() {
		if _, err := client.Produce(b.Context(), connect.NewRequest(req)); err != nil {
			b.Fatal(err)
		}
	}
}
