package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/endpoint"
)

// noForwardHeader asks a broker to answer NotLeader rather than forward a
// request it cannot serve: the client routes itself.
const noForwardHeader = "Sluice-No-Forward"

// Credentials authenticate a Client: an API key (traded for short-lived
// tokens at the control plane, refreshed before they expire) or a token.
type Credentials struct {
	apiKey string
	token  string
}

// APIKey returns credentials for an API key ("slk_…").
func APIKey(key string) Credentials { return Credentials{apiKey: key} }

// Token returns credentials for a token minted elsewhere; it is not
// refreshed, so the client fails with Unauthenticated once it expires.
func Token(jwt string) Credentials { return Credentials{token: jwt} }

// Option configures a Client.
type Option func(*options)

type options struct {
	hc             *http.Client
	tls            *tls.Config
	logger         *slog.Logger
	metadataMaxAge time.Duration
}

// WithHTTPClient sets the HTTP client for every call. The default speaks
// h2c to http:// endpoints and HTTP/2 over TLS to https:// ones; it
// overrides WithTLS.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.hc = hc } }

// WithTLS sets the TLS configuration of the default HTTP client's calls
// to https:// endpoints: the control plane's and every broker's (a broker
// serving TLS advertises an https:// address). Set RootCAs to trust a
// private CA (the cluster's, or sluice dev --tls's), Certificates or
// GetClientCertificate for a listener that wants a client certificate.
// The default verifies servers against the system's roots. TLS 1.2 is
// the least version used, whatever cfg says.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithLogger sets where the client logs retries and metadata refreshes
// (default: nowhere).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithMetadataMaxAge sets how long cached metadata is trusted before a
// refresh even without errors (default 5 minutes, Kafka's
// metadata.max.age.ms). It bounds how long a producer keeps partitioning
// over a topic's old partition count after partitions were added.
func WithMetadataMaxAge(d time.Duration) Option { return func(o *options) { o.metadataMaxAge = d } }

// Client is a connection to a Sluice cluster. It is safe for concurrent
// use; create one per process and share it.
type Client struct {
	endpoint string
	scheme   string
	hc       *http.Client
	logger   *slog.Logger
	creds    Credentials
	auth     sluicev1connect.AuthServiceClient
	cpRecord sluicev1connect.RecordServiceClient
	maxAge   time.Duration
	throttle throttleCounter

	tokMu     sync.Mutex
	token     string
	tokenExp  time.Time
	tokenLife time.Duration

	// ctx lives as long as the client: background metadata refreshes run
	// under it, so Close stops them.
	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	brokers    map[int32]broker
	topics     map[string]*topicMeta
	refreshing map[string]*metadataCall // topic → its refresh in progress
	refreshed  map[string]time.Time     // topic → when its last refresh started
	closed     bool
}

// metadataCall is one refresh of a topic's metadata that every caller
// needing it waits for (so a thousand producers of one topic make one
// request, not a thousand).
type metadataCall struct {
	done chan struct{}
	err  error // set before done closes
}

// Bounds of one metadata refresh: each broker asked gets brokerMetadataTimeout
// (a stopped broker must not use up the whole refresh), the refresh as a
// whole metadataTimeout.
// Refreshes of one topic start at least minRefreshInterval apart (Kafka's
// retry.backoff.ms), so errors that mark it stale in a tight loop (a
// cluster that refuses every connection) do not become a request storm.
const (
	brokerMetadataTimeout = 2 * time.Second
	metadataTimeout       = 10 * time.Second
	minRefreshInterval    = 100 * time.Millisecond
)

type broker struct {
	address string
	record  sluicev1connect.RecordServiceClient
}

// topicMeta is the cached metadata of one topic.
type topicMeta struct {
	name       string
	id         string
	partitions []partitionMeta
	fetched    time.Time
	// maxMessageBytes is the topic's max.message.bytes, the largest batch
	// its partitions accept; 0 when the server did not say.
	maxMessageBytes int32
}

type partitionMeta struct {
	leader      int32 // -1 offline
	leaderEpoch int32
	// hinted: the leader came from a NotLeader answer (observe), not from
	// metadata. A hint is followed once: a refusal while routing by it
	// refreshes the metadata instead.
	hinted bool
}

// New connects to the control plane at endpoint ("http://host:port" or
// https), authenticates with creds, and learns the brokers. It fails with a
// *connect.Error coded Unauthenticated for a bad key and Unavailable when
// the control plane cannot be reached.
func New(ctx context.Context, endpoint string, creds Credentials, opts ...Option) (*Client, error) {
	o := options{metadataMaxAge: 5 * time.Minute}
	for _, opt := range opts {
		opt(&o)
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sluice: endpoint %q must be an http:// or https:// URL", endpoint)
	}
	if creds.apiKey == "" && creds.token == "" {
		return nil, errors.New("sluice: credentials are empty: pass client.APIKey(key) or client.Token(jwt)")
	}
	if o.hc == nil {
		o.hc = defaultHTTPClient(o.tls)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	endpoint = strings.TrimRight(endpoint, "/")
	c := &Client{
		endpoint: endpoint, scheme: u.Scheme, hc: o.hc, logger: o.logger, creds: creds, maxAge: o.metadataMaxAge,
		brokers: map[int32]broker{}, topics: map[string]*topicMeta{}, refreshing: map[string]*metadataCall{}, refreshed: map[string]time.Time{},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.auth = sluicev1connect.NewAuthServiceClient(c.hc, endpoint)
	c.cpRecord = sluicev1connect.NewRecordServiceClient(c.hc, endpoint, connect.WithInterceptors(c.bearer()))
	if _, err := c.currentToken(ctx); err != nil {
		c.cancel()
		return nil, err
	}
	if _, err := c.refreshMetadata(ctx, nil, true); err != nil {
		c.cancel()
		return nil, fmt.Errorf("sluice: learn brokers at %s: %w", endpoint, err)
	}
	return c, nil
}

// defaultHTTPClient speaks h2c to http:// URLs and HTTP/2 over TLS with
// cfg (nil: the system's roots) to https:// ones: a control plane on
// plaintext may name brokers that serve TLS (https:// addresses).
func defaultHTTPClient(cfg *tls.Config) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP2(true)
	if cfg == nil {
		cfg = &tls.Config{}
	} else {
		cfg = cfg.Clone()
	}
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	return &http.Client{Transport: &http.Transport{
		Protocols:           &p,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 5 * time.Second,
		// A connection to a broker that stopped answering (paused, or cut
		// off without a reset) is pinged after 10 s of silence and dropped
		// 5 s later, so new calls dial afresh instead of queueing on it.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second},
	}}
}

// Close releases the client's connections. Producers and consumers made
// from it must be closed first.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.hc.CloseIdleConnections()
	return nil
}

// ---- tokens ----

// currentToken returns a token valid for a while yet, minting a new one
// from the API key when less than a fifth of its lifetime remains.
func (c *Client) currentToken(ctx context.Context) (string, error) {
	if c.creds.token != "" {
		return c.creds.token, nil
	}
	c.tokMu.Lock()
	defer c.tokMu.Unlock()
	if c.token != "" && time.Until(c.tokenExp) > c.tokenLife/5 {
		return c.token, nil
	}
	res, err := c.auth.CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: c.creds.apiKey}))
	err = normalize(ctx, err) // a reset reads as Canceled: Unavailable while ctx lasts
	if err != nil {
		if c.token != "" && time.Until(c.tokenExp) > 10*time.Second {
			c.logger.Warn("token refresh failed; using the current token", "err", err)
			return c.token, nil
		}
		return "", fmt.Errorf("sluice: log in at %s: %w", c.endpoint, err)
	}
	c.token = res.Msg.GetToken()
	c.tokenExp = res.Msg.GetExpireTime().AsTime()
	c.tokenLife = time.Until(c.tokenExp)
	return c.token, nil
}

// dropToken forgets a token the server refused, so the next call mints one.
func (c *Client) dropToken(tok string) {
	c.tokMu.Lock()
	defer c.tokMu.Unlock()
	if c.token == tok {
		c.token = ""
	}
}

// bearer adds the current token to every request, counts rate refusals
// (Stats) and turns other quota refusals into *QuotaError.
func (c *Client) bearer() connect.Interceptor { return bearerInterceptor{c} }

type bearerInterceptor struct{ c *Client }

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		tok, err := b.c.currentToken(ctx)
		if err != nil {
			return nil, err
		}
		req.Header().Set("Authorization", "Bearer "+tok)
		res, err := next(ctx, req)
		if connect.CodeOf(err) == connect.CodeUnauthenticated {
			b.c.dropToken(tok)
		}
		return res, b.c.observeQuota(kindOf(req.Spec().Procedure), err)
	}
}

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// ---- metadata and routing ----

// refreshMetadata fetches metadata for topics (nil: none but the brokers)
// from a broker, or from the control plane when fromControlPlane or no
// broker answers. A rate refusal (the last server asked refused with a
// retry delay) is sent again after the delay, while ctx lasts.
func (c *Client) refreshMetadata(ctx context.Context, topics []string, fromControlPlane bool) (*sluicev1.GetMetadataResponse, error) {
	for {
		m, err := c.refreshMetadataOnce(ctx, topics, fromControlPlane)
		if !throttled(err) {
			return m, err
		}
		if clock.Sleep(ctx, retryWait(err, 1)) != nil {
			return nil, err
		}
	}
}

func (c *Client) refreshMetadataOnce(ctx context.Context, topics []string, fromControlPlane bool) (*sluicev1.GetMetadataResponse, error) {
	req := &sluicev1.GetMetadataRequest{Topics: topics}
	if topics == nil {
		req.Topics = []string{}
	}
	var res *connect.Response[sluicev1.GetMetadataResponse]
	var err error
	if !fromControlPlane {
		for _, b := range c.brokerList() {
			bctx, cancel := context.WithTimeout(ctx, brokerMetadataTimeout)
			res, err = b.record.GetMetadata(bctx, connect.NewRequest(req))
			err = normalize(bctx, err)
			cancel()
			if err == nil || !retriable(err) || throttled(err) || ctx.Err() != nil {
				break
			}
		}
	}
	// The control plane is the source of truth: ask it when no broker
	// answers, and when a broker does not know a topic (a new topic
	// reaches the brokers a moment after it is created); not when a broker
	// throttled the tenant: refreshMetadata waits and asks again.
	if res == nil && !throttled(err) && (err == nil || retriable(err) || connect.CodeOf(err) == connect.CodeNotFound) {
		res, err = c.cpRecord.GetMetadata(ctx, connect.NewRequest(req))
		err = normalize(ctx, err) // a reset reads as Canceled: Unavailable while ctx lasts
	}
	if err != nil {
		return nil, err
	}
	if topics == nil && len(res.Msg.GetTopics()) > 0 {
		// GetMetadata with no topics means every topic; we asked for none.
		res.Msg.Topics = nil
	}
	c.applyMetadata(res.Msg)
	return res.Msg, nil
}

func (c *Client) brokerList() []broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]broker, 0, len(c.brokers))
	for _, b := range c.brokers {
		out = append(out, b)
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func (c *Client) applyMetadata(m *sluicev1.GetMetadataResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range m.GetBrokers() {
		if cur, ok := c.brokers[b.GetId()]; ok && cur.address == b.GetAddress() {
			continue
		}
		c.brokers[b.GetId()] = c.newBrokerLocked(b.GetAddress())
	}
	now := time.Now()
	for _, t := range m.GetTopics() {
		n := len(t.GetPartitions())
		// Partitions are only ever added: an answer with fewer for the
		// same topic comes from a broker that has not heard of the last
		// ones yet. Keep them, or records bound for them would fail.
		cur := c.topics[t.GetName()]
		if cur != nil && cur.id == t.GetId() && len(cur.partitions) > n {
			n = len(cur.partitions)
		}
		tm := &topicMeta{name: t.GetName(), id: t.GetId(), fetched: now, partitions: make([]partitionMeta, n), maxMessageBytes: t.GetMaxMessageBytes()}
		if cur != nil && cur.id == t.GetId() {
			copy(tm.partitions, cur.partitions)
		}
		for _, p := range t.GetPartitions() {
			if i := int(p.GetPartition()); i >= 0 && i < len(tm.partitions) {
				tm.partitions[i] = partitionMeta{leader: p.GetLeader(), leaderEpoch: p.GetLeaderEpoch()}
			}
		}
		c.topics[t.GetName()] = tm
	}
}

func (c *Client) newBrokerLocked(address string) broker {
	base := endpoint.URL(address, c.scheme)
	return broker{address: address, record: sluicev1connect.NewRecordServiceClient(c.hc, base, connect.WithInterceptors(c.bearer(), noForward{}))}
}

type noForward struct{}

func (noForward) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set(noForwardHeader, "1")
		return next(ctx, req)
	}
}
func (noForward) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (noForward) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// topic returns the topic's cached metadata, fetching it when missing or
// older than the max age (or marked stale after an error) and waiting for
// the fetch as long as ctx lasts. An unknown topic is a NotFound
// *connect.Error.
func (c *Client) topic(ctx context.Context, name string) (*topicMeta, error) {
	c.mu.Lock()
	tm := c.topics[name]
	c.mu.Unlock()
	if tm != nil && time.Since(tm.fetched) < c.maxAge {
		return tm, nil
	}
	if err := validTopic(name); err != nil {
		return nil, err
	}
	call := c.refreshTopic(name)
	select {
	case <-call.done:
	case <-ctx.Done():
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return nil, connect.NewError(code, fmt.Errorf("metadata of topic %q: %w", name, ctx.Err()))
	}
	if call.err != nil {
		return nil, call.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if tm := c.topics[name]; tm != nil {
		return tm, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("topic %q not found", name))
}

// cachedTopic returns the topic's metadata if any is cached, however old,
// and starts a refresh in the background when it is due. It never blocks
// on the network; nil means nothing is cached.
func (c *Client) cachedTopic(name string) *topicMeta {
	c.mu.Lock()
	tm := c.topics[name]
	c.mu.Unlock()
	if tm != nil && time.Since(tm.fetched) >= c.maxAge {
		c.refreshTopic(name)
	}
	return tm
}

// refreshTopic starts a refresh of the topic's metadata, or joins the one
// in progress. The refresh runs under the client's lifetime, bounded by
// metadataTimeout, so a caller that stops waiting does not cancel it for
// the others.
func (c *Client) refreshTopic(name string) *metadataCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	if call := c.refreshing[name]; call != nil {
		return call
	}
	call := &metadataCall{done: make(chan struct{})}
	c.refreshing[name] = call
	start := time.Now()
	if next := c.refreshed[name].Add(minRefreshInterval); next.After(start) {
		start = next
	}
	c.refreshed[name] = start
	go func() {
		err := clock.Sleep(c.ctx, time.Until(start))
		if err == nil {
			ctx, cancel := context.WithTimeout(c.ctx, metadataTimeout)
			_, err = c.refreshMetadata(ctx, []string{name}, false)
			cancel()
		}
		c.mu.Lock()
		delete(c.refreshing, name)
		c.mu.Unlock()
		call.err = err
		close(call.done)
	}()
	return call
}

func validTopic(name string) error {
	if name == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("topic: must not be empty"))
	}
	return nil
}

// topicWith is topic for a caller about to use one of its partitions: when
// the cached metadata has fewer partitions, it asks the control plane
// (which knows of added partitions first; brokers learn of them a moment
// later) before answering with what it has. Partitions may have been added
// since the cache was filled, and a group coordinator assigns them as soon
// as it knows of them. A partition the control plane does not have either
// is left for the caller to refuse.
func (c *Client) topicWith(ctx context.Context, name string, partition int32) (*topicMeta, error) {
	tm, err := c.topic(ctx, name)
	if err != nil || partition < 0 || int(partition) < len(tm.partitions) {
		return tm, err
	}
	if _, err := c.refreshMetadata(ctx, []string{name}, true); err != nil {
		return nil, err
	}
	return c.topic(ctx, name)
}

// leaderOf returns the client for the partition's leader and the leader
// epoch to fence with, or an Unavailable error while it is offline.
func (c *Client) leaderOf(ctx context.Context, topic string, partition int32) (sluicev1connect.RecordServiceClient, int32, error) {
	tm, err := c.topicWith(ctx, topic, partition)
	if err != nil {
		return nil, 0, err
	}
	if partition < 0 || int(partition) >= len(tm.partitions) {
		return nil, 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("partition: topic %q has partitions 0..%d; got %d", topic, len(tm.partitions)-1, partition))
	}
	pm := tm.partitions[partition]
	if pm.leader < 0 {
		return nil, 0, connect.NewError(connect.CodeUnavailable, fmt.Errorf("topic %q partition %d is offline: no in-sync replica is alive", topic, partition))
	}
	c.mu.Lock()
	b, ok := c.brokers[pm.leader]
	c.mu.Unlock()
	if !ok {
		return nil, 0, connect.NewError(connect.CodeUnavailable, fmt.Errorf("topic %q partition %d: leader broker %d is not in the metadata yet", topic, partition, pm.leader))
	}
	return b.record, pm.leaderEpoch, nil
}

// cachedLeaderEpoch is the leader epoch the cached metadata holds for a
// partition (from metadata or a leader hint), without asking anyone; false
// when none is cached.
func (c *Client) cachedLeaderEpoch(topic string, partition int32) (int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := c.topics[topic]
	if tm == nil || partition < 0 || int(partition) >= len(tm.partitions) {
		return 0, false
	}
	return tm.partitions[partition].leaderEpoch, true
}

// observe updates the routing cache after an error from a partition's
// leader. A NotLeader detail about this partition, at a leader epoch no
// older than the cached one, names the new leader, which the next request
// goes to (KIP-951's leader hint). Any other refusal that suggests stale
// routing marks the topic's metadata stale, so the next request refreshes
// it first, whatever leader epoch is cached: a NotLeader about another
// partition (its leader epoch does not compare with this one's), one at
// an older leader epoch (the broker and the cache disagree: the cache may
// hold a hint that was wrong), and a NotLeader naming another leader while
// the cache holds a hint (the broker the hint named refused too; the same
// hint again is only the answer of another request sent before it was
// taken). Metadata replaces
// what it answers for, hints included; so a client that keeps being
// refused relearns the partition's leader from the metadata, never
// waits for a hint that does not come.
func (c *Client) observe(topic string, partition int32, err error) {
	if err == nil {
		return
	}
	if nl := notLeaderOf(err); nl != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		tm := c.topics[topic]
		if tm == nil || partition < 0 || int(partition) >= len(tm.partitions) {
			return
		}
		cur := tm.partitions[partition]
		if (nl.GetTopicId() != "" && (nl.GetTopicId() != tm.id || nl.GetPartition() != partition)) ||
			nl.GetLeaderEpoch() < cur.leaderEpoch {
			c.markStaleLocked(tm)
			return
		}
		if nl.GetLeaderId() >= 0 && nl.GetLeaderAddress() != "" {
			if cur, ok := c.brokers[nl.GetLeaderId()]; !ok || cur.address != nl.GetLeaderAddress() {
				c.brokers[nl.GetLeaderId()] = c.newBrokerLocked(nl.GetLeaderAddress())
			}
		}
		hint := partitionMeta{leader: nl.GetLeaderId(), leaderEpoch: nl.GetLeaderEpoch(), hinted: true}
		if cur == hint {
			return // another answer of the requests sent before the hint
		}
		np := slicesClone(tm.partitions)
		np[partition] = hint
		next := &topicMeta{name: tm.name, id: tm.id, partitions: np, fetched: tm.fetched, maxMessageBytes: tm.maxMessageBytes}
		if cur.hinted {
			next.fetched = time.Time{}
		}
		c.topics[topic] = next
		return
	}
	// batchTooLarge: the topic's max.message.bytes changed under the cache.
	switch code := connect.CodeOf(err); {
	case code == connect.CodeUnavailable, code == connect.CodeFailedPrecondition, code == connect.CodeNotFound, code == connect.CodeUnknown,
		code == connect.CodeDeadlineExceeded, code == connect.CodeCanceled, batchTooLarge(err):
		c.mu.Lock()
		if tm := c.topics[topic]; tm != nil {
			c.markStaleLocked(tm)
		}
		c.mu.Unlock()
	}
}

// markStaleLocked makes the next use of topic tm refresh its metadata.
func (c *Client) markStaleLocked(tm *topicMeta) {
	stale := *tm
	stale.fetched = time.Time{}
	c.topics[tm.name] = &stale
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// notLeaderOf returns the NotLeader detail of err, if any.
func notLeaderOf(err error) *sluicev1.NotLeader {
	nl, _ := ErrorDetail[*sluicev1.NotLeader](err)
	return nl
}

// producerErrorOf returns the ProducerError detail of err, if any.
func producerErrorOf(err error) *sluicev1.ProducerError {
	pe, _ := ErrorDetail[*sluicev1.ProducerError](err)
	return pe
}

// backoff returns the delay before retry attempt n (1-based): exponential
// from 50 ms to 1 s with full jitter in its upper half.
func backoff(n int) time.Duration {
	d := 50 * time.Millisecond << min(n-1, 5)
	d = min(d, time.Second)
	return d/2 + rand.N(d/2+1)
}
