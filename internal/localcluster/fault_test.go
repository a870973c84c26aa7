package localcluster

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func TestLocalclusterFaultMatching(t *testing.T) {
	t.Parallel()
	const produce, produceMany, fetch = "/sluice.v1.RecordService/Produce", "/sluice.v1.RecordService/ProduceMany", "/sluice.v1.RecordService/Fetch"
	one := &sluicev1.ProduceRequest{Topic: "orders", Partition: 2}
	many := &sluicev1.ProduceManyRequest{Partitions: []*sluicev1.ProducePartition{{Topic: "a", Partition: 0}, {Topic: "orders", Partition: 1}}}
	for _, c := range []struct {
		name      string
		f         Fault
		broker    int32
		procedure string
		msg       proto.Message
		want      bool
	}{
		{"any call", Fault{}, 1, produce, one, true},
		{"other broker", Fault{Broker: 2}, 1, produce, one, false},
		{"this broker", Fault{Broker: 1}, 1, produce, one, true},
		{"method name", Fault{Procedure: "Produce"}, 1, produce, one, true},
		{"full procedure", Fault{Procedure: produce}, 1, produce, one, true},
		{"other method", Fault{Procedure: "Produce"}, 1, produceMany, many, false},
		{"topic, any partition", Fault{Topic: "orders", Partition: AnyPartition}, 1, produce, one, true},
		{"topic and partition", Fault{Topic: "orders", Partition: 2}, 1, produce, one, true},
		{"other partition", Fault{Topic: "orders", Partition: 0}, 1, produce, one, false},
		{"other topic", Fault{Topic: "payments", Partition: AnyPartition}, 1, produce, one, false},
		{"nested entry", Fault{Topic: "orders", Partition: 1}, 1, produceMany, many, true},
		{"nested partition 0", Fault{Topic: "a", Partition: 0}, 1, produceMany, many, true},
		{"nested, partition of another topic", Fault{Topic: "orders", Partition: 0}, 1, produceMany, many, false},
		{"stream start names no topic", Fault{Topic: "orders", Partition: AnyPartition}, 1, fetch, nil, false},
		{"stream start, no topic in the fault", Fault{Procedure: "Fetch"}, 1, fetch, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := &Faults{}
			fs.Add(c.f)
			got := fs.take(c.broker, c.procedure, c.msg)
			require.Equal(t, c.want, got != nil)
		})
	}
}

func TestLocalclusterFaultCountAndOrder(t *testing.T) {
	t.Parallel()
	fs := &Faults{}
	first := fs.Add(Fault{Procedure: "Produce", Count: 2, DropAnswer: true})
	second := fs.Add(Fault{Procedure: "Produce", Count: 1})
	msg := &sluicev1.ProduceRequest{Topic: "t"}
	var drops []bool
	for range 4 {
		f := fs.take(1, "/sluice.v1.RecordService/Produce", msg)
		if f == nil {
			drops = append(drops, false)
			continue
		}
		drops = append(drops, f.DropAnswer)
	}
	// Two calls hit the first, one the second, then none.
	require.Equal(t, []bool{true, true, false, false}, drops)
	require.Equal(t, 2, first.Hits())
	require.Equal(t, 1, second.Hits())
	require.Nil(t, fs.take(1, "/sluice.v1.RecordService/Produce", msg))

	// Unbounded until removed.
	always := fs.Add(Fault{Procedure: "Produce"})
	for range 3 {
		require.NotNil(t, fs.take(1, "/sluice.v1.RecordService/Produce", msg))
	}
	always.Remove()
	require.Nil(t, fs.take(1, "/sluice.v1.RecordService/Produce", msg))
	require.Equal(t, 3, always.Hits())
	fs.Add(Fault{})
	fs.Clear()
	require.Nil(t, fs.take(1, "/sluice.v1.RecordService/Produce", msg))
}
