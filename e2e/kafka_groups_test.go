package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	kafkagoplain "github.com/segmentio/kafka-go/sasl/plain"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// kafkaMemberEnv, when set, makes the test binary run as one member of a
// Kafka consumer group for TestKafkaGroupMembersKilled (TestMain
// dispatches to runKafkaMember): a separate process, so that the test can
// SIGKILL it.
const kafkaMemberEnv = "SLUICE_E2E_KAFKA_MEMBER"

// kafkaMemberConfig is the member's configuration, JSON in kafkaMemberEnv.
type kafkaMemberConfig struct {
	// Client is the library and protocol: franz-cooperative (classic,
	// cooperative-sticky), franz-kip848 (KIP-848's protocol), sarama
	// (classic, sticky) or kafka-go (classic, range).
	Client         string
	Bootstrap      []string
	Tenant, APIKey string
	Topic, Group   string
}

// runKafkaMember consumes the group's topic from the committed offsets
// (the earliest without), prints "R <partition> <offset> <value>" for each
// record, and only then marks it for the next commit (every 200 ms), until
// it is killed.
func runKafkaMember() int {
	var cfg kafkaMemberConfig
	if err := json.Unmarshal([]byte(os.Getenv(kafkaMemberEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "kafka member: config:", err)
		return 2
	}
	// sarama calls emit from a goroutine per partition.
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(p int32, o int64, v []byte) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "R %d %d %s\n", p, o, v)
		out.Flush()
	}
	ctx := context.Background()
	switch cfg.Client {
	case "franz-cooperative", "franz-kip848":
		opts := []kgo.Opt{
			kgo.SeedBrokers(cfg.Bootstrap...), kgo.SASL(plain.Auth{User: cfg.Tenant, Pass: cfg.APIKey}.AsMechanism()),
			kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
			kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(cfg.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.AutoCommitMarks(), kgo.AutoCommitInterval(200 * time.Millisecond),
			kgo.SessionTimeout(6 * time.Second),
		}
		if cfg.Client == "franz-kip848" {
			opts = append(opts, kgo.ServerSideBalancer())
		} else {
			opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()))
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kafka member:", err)
			return 2
		}
		for {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(topic string, p int32, err error) { fmt.Fprintf(os.Stderr, "fetch %s/%d: %v\n", topic, p, err) })
			for _, r := range fs.Records() {
				emit(r.Partition, r.Offset, r.Value)
				cl.MarkCommitRecords(r)
			}
		}
	case "sarama":
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Ltime|log.Lmicroseconds)
		scfg := sarama.NewConfig()
		scfg.Version = sarama.V3_6_0_0
		scfg.ClientID = "sluice-e2e-member"
		scfg.Net.SASL.Enable = true
		scfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		scfg.Net.SASL.User, scfg.Net.SASL.Password = cfg.Tenant, cfg.APIKey
		scfg.Consumer.Offsets.Initial = sarama.OffsetOldest
		scfg.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
		scfg.Consumer.Group.Session.Timeout = 6 * time.Second
		scfg.Consumer.Group.Heartbeat.Interval = time.Second
		scfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
		cg, err := sarama.NewConsumerGroup(cfg.Bootstrap, cfg.Group, scfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kafka member:", err)
			return 2
		}
		h := saramaMember{emit: emit}
		for {
			if err := cg.Consume(ctx, []string{cfg.Topic}, h); err != nil {
				fmt.Fprintln(os.Stderr, "consume:", err)
				time.Sleep(100 * time.Millisecond) // backoff: the session failed
			}
		}
	case "kafka-go":
		r := kafkago.NewReader(kafkago.ReaderConfig{
			Brokers: cfg.Bootstrap, GroupID: cfg.Group, Topic: cfg.Topic,
			Dialer:         &kafkago.Dialer{Timeout: 10 * time.Second, SASLMechanism: kafkagoplain.Mechanism{Username: cfg.Tenant, Password: cfg.APIKey}, ClientID: "sluice-e2e-member"},
			SessionTimeout: 6 * time.Second, HeartbeatInterval: time.Second, CommitInterval: 200 * time.Millisecond,
			StartOffset: kafkago.FirstOffset, MaxWait: 500 * time.Millisecond,
		})
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "fetch:", err)
				time.Sleep(100 * time.Millisecond) // backoff: the fetch failed
				continue
			}
			emit(int32(m.Partition), m.Offset, m.Value)
			if err := r.CommitMessages(ctx, m); err != nil {
				fmt.Fprintln(os.Stderr, "commit:", err)
			}
		}
	}
	fmt.Fprintln(os.Stderr, "kafka member: unknown client", cfg.Client)
	return 2
}

// saramaMember prints what it reads and marks it.
type saramaMember struct{ emit func(int32, int64, []byte) }

func (saramaMember) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (saramaMember) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h saramaMember) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		h.emit(m.Partition, m.Offset, m.Value)
		s.MarkMessage(m, "")
	}
	return nil
}

// groupMember is one member process; its "R" lines go to reads.
type groupMember struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// groupReads are the records the members printed, in the order the test
// received them.
type groupReads struct {
	mu   sync.Mutex
	recs []string        // values
	next map[int32]int64 // per partition, the offset after the highest read
}

func (g *groupReads) add(p int32, o int64, v string) {
	g.mu.Lock()
	g.recs = append(g.recs, v)
	if g.next == nil {
		g.next = map[int32]int64{}
	}
	g.next[p] = max(g.next[p], o+1)
	g.mu.Unlock()
}

// progress says, per partition, the offset after the highest read.
func (g *groupReads) progress() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprint(g.next)
}

func (g *groupReads) snapshot() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.recs...)
}

// startGroupMember starts a member: the test binary as kafka member
// (cfg), or kcat -G when client is "kcat".
func startGroupMember(t *testing.T, dir, name string, cfg kafkaMemberConfig, reads *groupReads) *groupMember {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	require.NoError(t, err)
	var cmd *exec.Cmd
	if cfg.Client == "kcat" {
		kcat := testenv.DebianTool(t, "kcat", "kcat")
		cmd = exec.Command(kcat, "-b", strings.Join(cfg.Bootstrap, ","),
			"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
			"-X", "sasl.username="+cfg.Tenant, "-X", "sasl.password="+cfg.APIKey,
			"-X", "session.timeout.ms=6000", "-X", "partition.assignment.strategy=cooperative-sticky",
			"-X", "auto.commit.interval.ms=200", "-X", "auto.offset.reset=earliest",
			"-d", "cgrp", "-u", "-q", "-f", `R %p %o %s\n`, "-G", cfg.Group, cfg.Topic)
	} else {
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		cmd = exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), kafkaMemberEnv+"="+string(b))
	}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = logf
	require.NoError(t, cmd.Start())
	m := &groupMember{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "R" {
				p, _ := strconv.ParseInt(f[1], 10, 32)
				o, _ := strconv.ParseInt(f[2], 10, 64)
				reads.add(int32(p), o, f[3])
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		logf.Close()
		close(m.done)
	}()
	t.Cleanup(m.kill)
	return m
}

func (m *groupMember) kill() {
	_ = m.cmd.Process.Kill()
	<-m.done
}

// TestKafkaGroupMembersKilled is the client matrix's group check, each
// Kafka client as a subtest: three members of one group (separate
// processes) read a six-partition topic; once every record is read and the
// group's committed offsets are at the end, one member is SIGKILLed and
// started again, and as many records again are produced. Every record is
// read, the committed offsets reach the new end, and no record committed
// before the kill is read again: the partitions the killed member held
// resume at its committed offsets, wherever they go.
func TestKafkaGroupMembersKilled(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: plainBin, DatabaseURL: testenv.PostgresURL(t), Kafka: true})
	tc := c.NewClient(t, "groups", "unused", 1, 1)
	bootstrap := c.KafkaBootstrap()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.SASL(plain.Auth{User: "groups", Pass: tc.APIKey}.AsMechanism()))
	require.NoError(t, err)
	t.Cleanup(admCl.Close)
	adm := kadm.NewClient(admCl)
	const n, partitions = 600, 6

	for _, client := range []string{"franz-cooperative", "franz-kip848", "sarama", "kafka-go", "kcat"} {
		t.Run(client, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			topic, group := "members-"+client, "group-"+client
			created, err := adm.CreateTopic(ctx, partitions, 3, nil, topic)
			require.NoError(t, err)
			require.NoError(t, created.Err)
			waitKafkaLeaders(t, ctx, adm, topic, partitions)
			produce := func(from int) {
				var recs []*kgo.Record
				for i := from; i < from+n; i++ {
					recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))})
				}
				require.NoError(t, admCl.ProduceSync(ctx, recs...).FirstErr())
			}
			// settled waits until every record below upTo was read and the
			// group's committed offsets sum to upTo.
			settled := func(reads *groupReads, upTo int) {
				testenv.Wait(t, 2*time.Minute, fmt.Sprintf("%d records read and committed", upTo), func() error {
					seen := map[string]bool{}
					for _, v := range reads.snapshot() {
						seen[v] = true
					}
					offs, err := adm.FetchOffsets(ctx, group)
					if err != nil {
						return err
					}
					committed := map[int32]int64{}
					var sum int64
					offs.Each(func(o kadm.OffsetResponse) { sum += max(o.At, 0); committed[o.Partition] = o.At })
					for i := range upTo {
						if !seen[strconv.Itoa(i)] {
							return fmt.Errorf("record %d not read (%d distinct read; read up to %s; committed %v)", i, len(seen), reads.progress(), committed)
						}
					}
					if sum != int64(upTo) {
						return fmt.Errorf("committed offsets sum to %d: %v", sum, committed)
					}
					return nil
				})
			}
			produce(0)
			reads := &groupReads{}
			cfg := kafkaMemberConfig{Client: client, Bootstrap: bootstrap, Tenant: "groups", APIKey: tc.APIKey, Topic: topic, Group: group}
			var members []*groupMember
			for i := range 3 {
				members = append(members, startGroupMember(t, c.Dir, fmt.Sprintf("%s-member-%d", client, i), cfg, reads))
			}
			settled(reads, n)
			before := len(reads.snapshot())
			members[0].kill()
			c.Mark("SIGKILL %s member 0", client)
			members[0] = startGroupMember(t, c.Dir, client+"-member-0-again", cfg, reads)
			produce(n)
			settled(reads, 2*n)
			for _, v := range reads.snapshot()[before:] {
				i, _ := strconv.Atoi(v)
				require.GreaterOrEqual(t, i, n, "record %s, committed before the kill, read again after it (member logs in %s)", v, c.Dir)
			}
		})
	}
}
