package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// jsonKey is a key of an -o json object.
var jsonKey = regexp.MustCompile(`"([^"\\]*)":`)

// requireJSONStyle checks text is -o json as docs/cli.md describes it:
// valid JSON, lowerCamelCase keys, and no double space anywhere but in the
// indentation.
func requireJSONStyle(t *testing.T, text string) {
	t.Helper()
	require.True(t, json.Valid([]byte(text)), text)
	for _, m := range jsonKey.FindAllStringSubmatch(text, -1) {
		require.Regexp(t, `^[a-z][A-Za-z0-9]*$`, m[1], "key %q is not lowerCamelCase in\n%s", m[1], text)
	}
	for _, l := range strings.Split(text, "\n") {
		require.NotContains(t, strings.TrimLeft(l, " "), "  ", "a double space in %q", l)
	}
}

// TestCLIJSONStyle: API responses are protojson with the API's camelCase
// names, enums by name, durations as protojson writes them, 64-bit numbers
// as strings and every field; and protojson's deliberately unstable
// whitespace (two spaces after some colons) never reaches the output.
func TestCLIJSONStyle(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	rf := int32(3)
	require.NoError(t, printJSON(&b, &sluicev1.DescribeTopicResponse{
		Topic:      &sluicev1.Topic{Name: "orders", PartitionCount: 6, ReplicationFactor: rf, Config: &sluicev1.TopicConfig{RetentionMs: new(int64(86400000))}},
		Partitions: []*sluicev1.PartitionInfo{{Partition: 0, Leader: 1, Replicas: []int32{1, 2, 3}, Isr: []int32{1, 2}}},
	}))
	requireJSONStyle(t, b.String())
	require.Contains(t, b.String(), `"partitionCount": 6,`)
	require.Contains(t, b.String(), `"replicationFactor": 3,`)
	require.Contains(t, b.String(), `"retentionMs": "86400000"`)
	require.Contains(t, b.String(), `"createTime": null`, "unset fields are printed")
	require.True(t, strings.HasSuffix(b.String(), "}\n"))

	b.Reset()
	require.NoError(t, printJSON(&b, &sluicev1.GetAlertPolicyResponse{Policy: &sluicev1.AlertPolicy{ExpiryRiskThreshold: durationpb.New(90 * time.Minute)}}))
	requireJSONStyle(t, b.String())
	require.Contains(t, b.String(), `"expiryRiskThreshold": "5400s"`)

	b.Reset()
	require.NoError(t, printJSON(&b, &sluicev1.ListAlertsResponse{Alerts: fixedAlerts()}))
	requireJSONStyle(t, b.String())
	require.Contains(t, b.String(), `"kind": "ALERT_KIND_RETENTION_EXPIRY_RISK"`)

	// A consumed record: the same names.
	j, err := json.Marshal(toJSONRecord(&client.Record{Topic: "orders", Key: []byte{0xff}, Value: []byte{0x80},
		Headers: []client.Header{{Key: "b", Value: []byte{0x80}}}}))
	require.NoError(t, err)
	requireJSONStyle(t, string(j))
}

// TestCLIJSONErrors: with -o json an error is one JSON object on stderr,
// with the Connect code, also when the command line itself is wrong (before
// -o is parsed) or -o comes from $SLUICE_OUTPUT; the exit code is the same.
func TestCLIJSONErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-o", "json", "topic", "lst"},
		{"topic", "lst", "--output=json"},
		{"topic", "create", "x", "-p", "many", "-ojson"},
	} {
		out, errOut, code := run(t, args...)
		require.Equal(t, ExitUsage, code, "%q", args)
		require.Empty(t, out)
		var e struct {
			Error jsonError `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(errOut), &e), "%q: stderr %q", args, errOut)
		require.Equal(t, "invalid_argument", e.Error.Code, "%q", args)
		require.NotEmpty(t, e.Error.Message)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	}
	t.Setenv("SLUICE_OUTPUT", "json")
	t.Setenv("SLUICE_ACKS", "bogus")
	_, errOut, code := run(t, "produce", "orders", "--value", "x")
	require.Equal(t, ExitUsage, code)
	require.JSONEq(t, `{"error":{"code":"invalid_argument","message":"acks \"bogus\": choose all, 1 or 0","fromEnvironment":["--acks ($SLUICE_ACKS)","--output ($SLUICE_OUTPUT)"]}}`, errOut)
	// -o table on the command line wins over the variable.
	_, errOut, code = run(t, "-o", "table", "produce", "orders", "--value", "x")
	require.Equal(t, ExitUsage, code)
	require.True(t, strings.HasPrefix(errOut, "sluice: acks"), errOut)
}
