package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/internal/clock"
)

// MaxBatch bounds how many partition changes one store transaction of the
// controller writes (store.UpdatePartitionsFenced): a round with more
// changes, say every partition a failed broker led, writes them in
// batches of at most this many, so a transaction's locks and size stay
// bounded while the round's cost follows the batches, not the partitions.
const MaxBatch = 500

// Config is the controller's configuration.
type Config struct {
	// LeaseTTL is how long the controller lease lasts without renewal: how
	// long the cluster may go without an active controller when the active
	// one dies.
	LeaseTTL time.Duration
	// Interval is how often the controller renews its lease and reconciles.
	Interval time.Duration
	// PreferredLeaderDelay is how long a preferred leader must have been
	// live before leadership moves back to it.
	PreferredLeaderDelay time.Duration
	// StartupGrace is how long a newly active controller waits before it
	// declares any broker dead (the server sets it to the broker lease).
	StartupGrace time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		LeaseTTL:             3 * time.Second,
		Interval:             250 * time.Millisecond,
		PreferredLeaderDelay: 10 * time.Second,
	}
}

// RegisterFlags binds the operator-facing settings to flags.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.LeaseTTL, "controller-lease", c.LeaseTTL, "how long the active controller's lease lasts without renewal; another control-plane replica takes over after it expires")
	fs.DurationVar(&c.PreferredLeaderDelay, "preferred-leader-delay", c.PreferredLeaderDelay, "how long a returning preferred leader must stay live before leadership moves back to it")
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case c.LeaseTTL < time.Second || c.LeaseTTL > time.Minute:
		return fmt.Errorf("--controller-lease must be between 1s and 1m; got %s", c.LeaseTTL)
	case c.Interval <= 0 || c.Interval > c.LeaseTTL/3:
		return fmt.Errorf("controller interval must be positive and at most a third of --controller-lease (%s); got %s", c.LeaseTTL, c.Interval)
	case c.PreferredLeaderDelay < 0:
		return fmt.Errorf("--preferred-leader-delay must not be negative; got %s", c.PreferredLeaderDelay)
	case c.StartupGrace < 0:
		return fmt.Errorf("controller startup grace must not be negative; got %s", c.StartupGrace)
	}
	return nil
}

// Deps are the controller's collaborators.
type Deps struct {
	Store      store.Store
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Clock is the time rounds read and tick on; clock.Real when nil.
	Clock clock.Clock
}

// Controller is one control-plane replica's candidate controller. Create it
// with New and run it with Run; it is active only while it holds the lease.
type Controller struct {
	cfg    Config
	store  store.Store
	logger *slog.Logger
	now    func() time.Time
	clock  clock.Clock
	holder string
	m      metrics

	// Owned by the Run goroutine.
	active      bool
	epoch       int64
	activeSince time.Time
	renewedAt   time.Time // when the lease was last acquired or renewed
	liveSince   map[int32]seen
	restarted   map[int32]bool // brokers seen registering again, not yet acted on
	view        *view          // nil until the first read of an activation
	// quiet, when non-nil, is the liveness of the last round that decided
	// no change, at view generation quietGen.
	quiet    *Liveness
	quietGen uint64
}

// seen is since when a broker has been live under one epoch.
type seen struct {
	epoch int64
	since time.Time
}

type metrics struct {
	active          prometheus.Gauge
	epoch           prometheus.Gauge
	offline         prometheus.Gauge
	underReplicated prometheus.Gauge
	elections       *prometheus.CounterVec
	changes         *prometheus.CounterVec
}

// New returns a controller with a fresh random holder id and registers its
// metrics. It starts nothing.
func New(cfg Config, deps Deps) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	deps.Clock = clock.Or(deps.Clock)
	if deps.Registerer == nil {
		deps.Registerer = prometheus.NewRegistry()
	}
	c := &Controller{cfg: cfg, store: deps.Store, logger: deps.Logger, now: deps.Clock.Now, clock: deps.Clock, holder: newHolder()}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "sluice", Subsystem: "controlplane", Name: name, Help: help}
	}
	c.m = metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts(opts("controller_active",
			"1 while this replica holds the controller lease, else 0."))),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts(opts("controller_epoch",
			"The controller-lease epoch this replica last held (0: never)."))),
		offline: prometheus.NewGauge(prometheus.GaugeOpts(opts("offline_partitions",
			"Partitions without a leader (no live ISR member), as the active controller last saw them; 0 on other replicas."))),
		underReplicated: prometheus.NewGauge(prometheus.GaugeOpts(opts("under_replicated_partitions",
			"Partitions whose ISR is smaller than their replica set, as the active controller last saw them; 0 on other replicas."))),
		elections: prometheus.NewCounterVec(prometheus.CounterOpts(opts("leader_elections_total",
			"Leader elections made by this replica's controller, by reason.")), []string{"reason"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts(opts("controller_partition_changes_total",
			"Partition state changes written by this replica's controller, by reason.")), []string{"reason"}),
	}
	for _, r := range Reasons {
		c.m.changes.WithLabelValues(string(r))
		if r.Elects() {
			c.m.elections.WithLabelValues(string(r))
		}
	}
	for _, col := range []prometheus.Collector{c.m.active, c.m.epoch, c.m.offline, c.m.underReplicated, c.m.elections, c.m.changes} {
		if err := deps.Registerer.Register(col); err != nil {
			return nil, fmt.Errorf("register controller metrics: %w", err)
		}
	}
	return c, nil
}

// newHolder returns "host/pid/random": unique per process (and per
// Controller), readable in the lease row.
func newHolder() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Holder is the id this controller acquires the lease with.
func (c *Controller) Holder() string { return c.holder }

// Run renews the lease and reconciles every Interval until ctx is cancelled.
// It does not release the lease on return: another replica takes over when
// it expires.
func (c *Controller) Run(ctx context.Context) {
	t := c.clock.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.round(ctx)
		select {
		case <-ctx.Done():
			c.deactivate("stopped")
			return
		case <-t.C():
		}
	}
}

// round is one lease renewal and, while active, one reconciliation. An
// active controller renews its lease once a third of it has passed, not
// every round: until the lease expires no other replica can take it (and
// the controller epoch fences the writes of one that lost it anyway), and
// the renewals were a store write every Interval, most of a SQLite
// store's steady writes, which heartbeats queue behind.
func (c *Controller) round(ctx context.Context) {
	now := c.now()
	if c.active && now.Before(c.renewedAt.Add(c.cfg.LeaseTTL/3)) {
		if err := c.reconcile(ctx, now, c.epoch); err != nil && ctx.Err() == nil {
			c.logger.Warn("controller: reconcile", "epoch", c.epoch, "err", err)
		}
		return
	}
	lease, ok, err := c.store.AcquireControllerLease(ctx, c.holder, now, c.cfg.LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			c.logger.Warn("controller: acquire lease", "err", err)
		}
		c.deactivate("lease unknown")
		return
	}
	if !ok {
		c.deactivate("lease held by " + lease.Holder)
		return
	}
	c.renewedAt = now
	if !c.active || lease.Epoch != c.epoch {
		c.active, c.epoch, c.activeSince, c.liveSince = true, lease.Epoch, now, map[int32]seen{}
		c.view, c.quiet = nil, nil // read whole again: another controller wrote meanwhile
		c.m.active.Set(1)
		c.m.epoch.Set(float64(lease.Epoch))
		c.logger.Info("controller active", "holder", c.holder, "epoch", lease.Epoch, "grace", c.cfg.StartupGrace)
	}
	if err := c.reconcile(ctx, now, lease.Epoch); err != nil && ctx.Err() == nil {
		c.logger.Warn("controller: reconcile", "epoch", lease.Epoch, "err", err)
	}
}

func (c *Controller) deactivate(why string) {
	if c.active {
		c.logger.Info("controller inactive", "holder", c.holder, "epoch", c.epoch, "why", why)
	}
	c.active, c.liveSince, c.restarted, c.view, c.quiet = false, nil, nil, nil, nil
	c.m.active.Set(0)
	c.m.offline.Set(0)
	c.m.underReplicated.Set(0)
}

// reconcile reads the brokers, brings the partition view up to date,
// decides and writes the changes under the controller epoch.
func (c *Controller) reconcile(ctx context.Context, now time.Time, epoch int64) error {
	brokers, err := c.store.ListBrokers(ctx)
	if err != nil {
		return err
	}
	if err := c.refresh(ctx); err != nil {
		return err
	}
	for id := range c.trackLiveness(brokers, now) {
		if c.restarted == nil {
			c.restarted = map[int32]bool{}
		}
		c.restarted[id] = true // kept until a round past the startup grace applies it
	}
	v := c.view
	defer c.report()
	if now.Before(c.activeSince.Add(c.cfg.StartupGrace)) {
		return nil
	}
	// A broker that registered again (new broker epoch) while its lease was
	// still live restarted: its previous incarnation failed, and its log may
	// have lost a tail or everything (an empty disk). For this round it
	// counts as dead, so it leaves every ISR and leadership; it rejoins the
	// ISR only when a leader sees it caught up (AlterPartition), as Kafka's
	// KIP-903 intends.
	bview := brokers
	if len(c.restarted) > 0 {
		restarted := c.restarted
		c.restarted = nil
		bview = slices.Clone(brokers)
		for i := range bview {
			if restarted[bview[i].ID] {
				bview[i].LeaseExpiresAt = now.Add(-time.Nanosecond)
				c.logger.Info("broker restarted: removing it from ISRs", "broker", bview[i].ID, "broker_epoch", bview[i].Epoch)
			}
		}
	}
	in := Input{Now: now, Brokers: bview, Partitions: v.parts, LiveSince: c.sinceMap(), PreferredLeaderDelay: c.cfg.PreferredLeaderDelay, Unclean: v.unclean}
	// Decide is a function of the partitions, the topics' unclean election
	// and the liveness alone: when none of them moved since a round that
	// decided nothing, this one would decide nothing either.
	live := in.Liveness()
	if c.quiet != nil && c.quietGen == v.gen && c.quiet.Equal(live) {
		return nil
	}
	changes := Decide(in)
	if len(changes) == 0 {
		c.quiet, c.quietGen = &live, v.gen
		return nil
	}
	c.quiet = nil
	for batch := range slices.Chunk(changes, MaxBatch) {
		updates := make([]store.PartitionUpdate, len(batch))
		for i, ch := range batch {
			updates[i] = store.PartitionUpdate{Partition: ch.After, ExpectedEpoch: ch.Before.PartitionEpoch}
		}
		outcomes, err := c.store.UpdatePartitionsFenced(ctx, updates, epoch)
		switch {
		case errors.Is(err, store.ErrFenced):
			c.deactivate("fenced by a newer controller epoch")
			return nil
		case err != nil:
			return fmt.Errorf("write %d partition changes: %w", len(batch), err)
		}
		for i, ch := range batch {
			switch err := outcomes[i]; {
			case err == nil:
			case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
				// Changed (a leader's AlterPartition) or deleted since the
				// view's version: the next round's changes bring the row as
				// it is then (or its topic's deletion), and it is decided
				// again.
				continue
			default:
				return fmt.Errorf("write partition %s/%d: %w", ch.After.TopicID, ch.After.Partition, err)
			}
			v.set(ch.After)
			c.m.changes.WithLabelValues(string(ch.Reason)).Inc()
			if ch.Reason.Elects() {
				c.m.elections.WithLabelValues(string(ch.Reason)).Inc()
			}
			level := slog.LevelInfo
			if ch.Reason == ReasonOffline || ch.Reason == ReasonUncleanElection {
				level = slog.LevelWarn
			}
			c.logger.Log(ctx, level, "partition changed by controller", "reason", ch.Reason, "controller_epoch", epoch,
				"topic_id", ch.After.TopicID, "topic", v.names[ch.After.TopicID], "partition", ch.After.Partition,
				"leader_before", ch.Before.Leader, "leader", ch.After.Leader, "leader_epoch", ch.After.LeaderEpoch,
				"isr_before", ch.Before.ISR, "isr", ch.After.ISR, "partition_epoch", ch.After.PartitionEpoch)
		}
	}
	return nil
}

// refresh brings the partition view to the store's current metadata
// version: a read of the version, and when it moved, of what changed since
// the view's (store.MetadataChangesSince); the first time after
// activation, behind the store's horizon of kept deletions, or when the
// store's version went backwards (a restored database), a read of every
// partition instead.
func (c *Controller) refresh(ctx context.Context) error {
	if c.view != nil {
		version, err := c.store.MetadataVersion(ctx)
		if err != nil {
			return err
		}
		if version == c.view.version {
			return nil // nothing committed since the view's version
		}
		if version > c.view.version {
			ch, err := c.store.MetadataChangesSince(ctx, c.view.version)
			switch {
			case err == nil && ch.Version >= c.view.version:
				c.view.apply(ch)
				return nil
			case err != nil && !errors.Is(err, store.ErrChangesPruned):
				return err
			}
		}
		c.logger.Info("controller: reading every partition again", "view_version", c.view.version, "store_version", version)
	}
	v, err := load(ctx, c.store)
	if err != nil {
		return err
	}
	c.view, c.quiet = v, nil
	return nil
}

// trackLiveness updates since when each broker has been live under its
// current epoch; a broker seen dead, or registered again, starts over. It
// returns the brokers this controller saw live under an older epoch last
// round: they restarted without their lease running out.
func (c *Controller) trackLiveness(brokers []store.Broker, now time.Time) map[int32]bool {
	next := make(map[int32]seen, len(brokers))
	var restarted map[int32]bool
	for _, b := range brokers {
		if !b.Live(now) {
			continue
		}
		s, ok := c.liveSince[b.ID]
		if ok && s.epoch != b.Epoch {
			if restarted == nil {
				restarted = map[int32]bool{}
			}
			restarted[b.ID] = true
		}
		if !ok || s.epoch != b.Epoch {
			s = seen{epoch: b.Epoch, since: now}
		}
		next[b.ID] = s
	}
	c.liveSince = next
	return restarted
}

func (c *Controller) sinceMap() map[int32]time.Time {
	out := make(map[int32]time.Time, len(c.liveSince))
	for id, s := range c.liveSince {
		out[id] = s.since
	}
	return out
}

// report sets the partition gauges from the view after this round's
// writes.
func (c *Controller) report() {
	if !c.active || c.view == nil {
		return
	}
	var offline, under int
	for _, p := range c.view.parts {
		if p.Leader < 0 {
			offline++
		}
		if len(p.ISR) < len(p.Replicas) {
			under++
		}
	}
	c.m.offline.Set(float64(offline))
	c.m.underReplicated.Set(float64(under))
}
