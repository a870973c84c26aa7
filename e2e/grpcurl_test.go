package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// grpcurlResult is one grpcurl run.
type grpcurlResult struct {
	stdout, stderr string
	code           int // exit code
}

// runGrpcurl runs the pinned grpcurl with args, as a user would from a
// shell, and returns what it printed and its exit code.
func runGrpcurl(t *testing.T, bin string, args ...string) grpcurlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "grpcurl %v did not exit", args)
	r := grpcurlResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		r.code = exit.ExitCode()
	} else {
		require.NoError(t, err, "grpcurl %v", args)
	}
	return r
}

// TestCLIGrpcurlDiscovery: a gRPC tool with no Sluice code finds its way:
// grpcurl lists and describes the services of a broker and of the control
// plane through reflection, checks their health, produces and fetches a
// record on a broker with a token it got from the control plane for the
// tenant's API key, the broker's address from the control plane's
// GetMetadata, and is told by the control plane that Produce is the
// brokers' business and how to find them. The commands are the ones
// docs/api.md shows.
func TestCLIGrpcurlDiscovery(t *testing.T) {
	t.Parallel()
	grpcurl := testenv.Grpcurl(t)
	c := testcluster.Start(t, testcluster.Options{Bin: plainBin, DatabaseURL: testenv.PostgresURL(t)})
	cl := c.NewClient(t, "grpcurl", "orders", 1, 2)
	cp := strings.TrimPrefix(c.ControlPlane(), "http://")
	ok := func(args ...string) string {
		t.Helper()
		r := runGrpcurl(t, grpcurl, args...)
		require.Zero(t, r.code, "grpcurl %v:\n%s%s", args, r.stdout, r.stderr)
		return r.stdout
	}

	// As docs/api.md goes: a token for the API key, then the brokers'
	// addresses from the control plane.
	var token struct {
		Token string `json:"token"`
	}
	out := ok("-plaintext", "-d", `{"api_key": "`+cl.APIKey+`"}`, cp, "sluice.v1.AuthService/CreateToken")
	require.NoError(t, json.Unmarshal([]byte(out), &token), out)
	require.NotEmpty(t, token.Token, out)
	bearer := "authorization: Bearer " + token.Token
	var md struct {
		Brokers []struct {
			ID      int32  `json:"id"`
			Address string `json:"address"`
		} `json:"brokers"`
	}
	out = ok("-plaintext", "-H", bearer, "-d", `{"topics": ["orders"]}`, cp, "sluice.v1.RecordService/GetMetadata")
	require.NoError(t, json.Unmarshal([]byte(out), &md), out)
	require.Len(t, md.Brokers, len(c.BrokerIDs()), out)
	for _, b := range md.Brokers {
		require.Equal(t, c.Broker(b.ID).Advertised(), b.Address, out)
	}
	broker := md.Brokers[0].Address

	// list: exactly what each serves; brokers do not advertise the
	// broker-to-broker ReplicaService.
	require.Equal(t, strings.Join([]string{
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		"sluice.v1.GroupService",
		"sluice.v1.RecordService",
		"sluice.v1.TransactionService",
	}, "\n")+"\n", ok("-plaintext", broker, "list"))
	require.Equal(t, strings.Join([]string{
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		"sluice.v1.APIKeyService",
		"sluice.v1.AlertService",
		"sluice.v1.AuthService",
		"sluice.v1.BillingService",
		"sluice.v1.BrokerService",
		"sluice.v1.OperatorService",
		"sluice.v1.RecordService",
		"sluice.v1.TenantService",
		"sluice.v1.TopicService",
	}, "\n")+"\n", ok("-plaintext", cp, "list"))

	// describe.
	out = ok("-plaintext", broker, "describe", "sluice.v1.RecordService")
	require.Contains(t, out, "sluice.v1.RecordService is a service:")
	// Each RPC shows who may call it, the (sluice.v1.access) option.
	require.Contains(t, out, "rpc Produce ( .sluice.v1.ProduceRequest ) returns ( .sluice.v1.ProduceResponse ) {")
	require.Contains(t, out, "rpc Fetch ( .sluice.v1.FetchRequest ) returns ( .sluice.v1.FetchResponse ) {")
	require.Contains(t, out, "option (.sluice.v1.access) = {")
	out = ok("-plaintext", broker, "describe", "sluice.v1.GroupService")
	require.Contains(t, out, "rpc FindCoordinator ( .sluice.v1.FindCoordinatorRequest )")
	out = ok("-plaintext", broker, "describe", "sluice.v1.ProduceRequest")
	require.Contains(t, out, "string topic = 1;")

	// health, with no credentials.
	for _, addr := range []string{broker, cp} {
		require.JSONEq(t, `{"status": "SERVING"}`, ok("-plaintext", addr, "grpc.health.v1.Health/Check"), addr)
	}
	require.JSONEq(t, `{"status": "SERVING"}`, ok("-plaintext", "-d", `{"service": "sluice.v1.RecordService"}`, broker, "grpc.health.v1.Health/Check"))

	// Produce and Fetch on a broker (it forwards to the partition's leader
	// if it is not that), with the tenant's token.
	out = ok("-plaintext", "-emit-defaults", "-H", bearer,
		"-d", `{"topic": "orders", "partition": 0, "records": {"records": [{"key": "aWQtMQ==", "value": "aGVsbG8="}]}}`,
		broker, "sluice.v1.RecordService/Produce")
	var produced struct {
		BaseOffset string `json:"baseOffset"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &produced), out)
	require.Equal(t, "0", produced.BaseOffset, out)
	out = ok("-plaintext", "-H", bearer, "-d", `{"topic": "orders", "partition": 0, "offset": 0}`,
		broker, "sluice.v1.RecordService/Fetch")
	var fetched struct {
		Records []struct {
			Offset string `json:"offset"`
			Key    string `json:"key"`
			Value  string `json:"value"`
		} `json:"records"`
		HighWatermark string `json:"highWatermark"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &fetched), out)
	require.Len(t, fetched.Records, 1, out)
	require.Equal(t, "aWQtMQ==", fetched.Records[0].Key)
	require.Equal(t, "aGVsbG8=", fetched.Records[0].Value) // "hello"
	require.Equal(t, "1", fetched.HighWatermark)

	// Without the token the broker refuses, and says why.
	r := runGrpcurl(t, grpcurl, "-plaintext", "-d", `{"topic": "orders"}`, broker, "sluice.v1.RecordService/Produce")
	require.NotZero(t, r.code)
	require.Contains(t, r.stderr, "Code: Unauthenticated")

	// The control plane points Produce, with a token or without, at the
	// brokers; GetMetadata there names them.
	for _, args := range [][]string{
		{"-plaintext", "-H", bearer, "-d", `{"topic": "orders"}`, cp, "sluice.v1.RecordService/Produce"},
		{"-plaintext", "-d", `{"topic": "orders"}`, cp, "sluice.v1.RecordService/Produce"},
	} {
		r := runGrpcurl(t, grpcurl, args...)
		require.NotZero(t, r.code, r.stdout)
		require.Contains(t, r.stderr, "Code: Unimplemented")
		require.Contains(t, r.stderr, "Message: RecordService.Produce is served by brokers, not the control plane: "+
			"call RecordService.GetMetadata here for the broker addresses of a topic's partitions and their leaders, then call Produce on any broker")
		require.NotContains(t, r.stderr, cl.TenantID)
	}
	r = runGrpcurl(t, grpcurl, "-plaintext", "-H", bearer, "-d", `{}`, cp, "sluice.v1.GroupService/ListGroups")
	require.NotZero(t, r.code, r.stdout)
	require.Contains(t, r.stderr, "Code: Unimplemented")
	require.Contains(t, r.stderr, "GroupService.ListGroups is served by brokers")
}
