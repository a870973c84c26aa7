package testcluster

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func recs(vals ...string) []Record {
	out := make([]Record, len(vals))
	for i, v := range vals {
		out[i] = Record{Offset: int64(i), Value: v, LeaderEpoch: 1}
	}
	return out
}

func TestCheckerFindsEachAnomaly(t *testing.T) {
	t.Parallel()
	acked := func(off int64, vals ...string) Op { return Op{Partition: 0, Values: vals, Outcome: Acked, Offset: off} }
	tests := []struct {
		name  string
		ops   []Op
		polls []Poll
		final []Record
		kinds []string
	}{
		{
			name:  "clean",
			ops:   []Op{acked(0, "a", "b"), {Values: []string{"c"}, Outcome: Indefinite}, {Values: []string{"d"}, Outcome: Indefinite}, acked(3, "e")},
			polls: []Poll{{Offset: 0, Value: "a"}, {Offset: 1, Value: "b"}, {Offset: 2, Value: "c"}},
			final: recs("a", "b", "c", "e"),
		},
		{name: "lost", ops: []Op{acked(0, "a"), acked(1, "b")}, final: recs("a"), kinds: []string{"lost"}},
		{name: "moved", ops: []Op{acked(0, "a"), acked(1, "b")}, final: recs("b", "a"), kinds: []string{"inconsistent-offset"}},
		{name: "two acks at one offset", ops: []Op{acked(0, "a"), acked(0, "b")}, final: recs("a", "b"), kinds: []string{"inconsistent-offset"}},
		{name: "duplicate", ops: []Op{acked(0, "a")}, final: recs("a", "a"), kinds: []string{"duplicate"}},
		{name: "unexpected", ops: []Op{acked(0, "a")}, final: recs("a", "zz"), kinds: []string{"unexpected"}},
		{name: "refused but present", ops: []Op{{Values: []string{"a"}, Outcome: Failed}}, final: recs("a"), kinds: []string{"failed-present"}},
		{name: "gap", ops: []Op{acked(0, "a"), acked(2, "b")}, final: []Record{{Offset: 0, Value: "a"}, {Offset: 2, Value: "b"}}, kinds: []string{"gap"}},
		{name: "epochs go down", ops: []Op{acked(0, "a", "b")}, final: []Record{{Offset: 0, Value: "a", LeaderEpoch: 2}, {Offset: 1, Value: "b", LeaderEpoch: 1}}, kinds: []string{"epoch-order"}},
		{name: "consumer read a vanished record", ops: []Op{acked(0, "a"), {Values: []string{"x"}, Outcome: Indefinite}}, polls: []Poll{{Offset: 0, Value: "a"}, {Offset: 1, Value: "x"}}, final: recs("a"), kinds: []string{"poll-diverged"}},
		{name: "consumer skipped", ops: []Op{acked(0, "a", "b")}, polls: []Poll{{Offset: 1, Value: "b"}}, final: recs("a", "b"), kinds: []string{"poll-order"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := Check(tt.ops, tt.polls, map[int32][]Record{0: tt.final})
			var kinds []string
			for k := range r.Counts {
				kinds = append(kinds, k)
			}
			require.ElementsMatch(t, tt.kinds, kinds, r.String())
		})
	}
}

func TestCheckerStats(t *testing.T) {
	t.Parallel()
	r := Check([]Op{
		{Values: []string{"a", "b"}, Outcome: Acked},
		{Values: []string{"c"}, Outcome: Indefinite},
		{Values: []string{"d"}, Outcome: Indefinite},
		{Values: []string{"e"}, Outcome: Failed},
	}, nil, map[int32][]Record{0: recs("a", "b", "c")})
	require.True(t, r.OK(), r.String())
	require.Equal(t, 4, r.Requests)
	require.Equal(t, 2, r.AckedRecords)
	require.Equal(t, 2, r.IndefiniteRecords)
	require.Equal(t, 1, r.IndefinitePresent)
	require.Equal(t, 1, r.FailedRecords)
}

func TestClusterProxyModes(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p := NewProxy(t, ln.Addr().String())
	echo := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err := io.ReadFull(c, buf)
		return err
	}
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	require.NoError(t, echo(c))

	p.SetMode(Blackhole)
	require.Error(t, echo(c), "a blackhole answers nothing")
	p.SetMode(Pass)
	require.Error(t, echo(c), "healing a blackhole closes the connections it held")

	c, err = net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	require.NoError(t, echo(c))
	p.SetMode(Cut)
	require.Error(t, echo(c), "a cut closes open connections")
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err) // the listener accepts, then closes at once
	require.Error(t, echo(c2))
	p.SetMode(Pass)
	c, err = net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	require.NoError(t, echo(c))
}

// TestAddrInUse picks the address a failed listen names, so a broker is
// restarted with a new port for that address only.
func TestAddrInUse(t *testing.T) {
	out := "=== broker-1 start\nsluice: listen on --metrics-addr 127.0.0.1:20002: listen tcp 127.0.0.1:20002: bind: address already in use\n"
	if got := addrInUse(out, "127.0.0.1:20001", "127.0.0.1:20002"); got != "127.0.0.1:20002" {
		t.Fatalf("got %q", got)
	}
	if got := addrInUse("broker serving", "127.0.0.1:20001"); got != "" {
		t.Fatalf("got %q", got)
	}
}
