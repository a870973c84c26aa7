package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/admission"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/tenants"
)

// versions are the API keys served and the versions of each: what
// ApiVersions advertises, and all that is answered. A request of another
// key or version closes the connection, as Kafka does (ApiVersions
// itself is answered with UNSUPPORTED_VERSION and this list).
var versions = map[int16][2]int16{
	kmsg.Produce.Int16():          {3, 12}, // v12: KIP-890 part 2 (see Txns)
	kmsg.Fetch.Int16():            {4, 16},
	kmsg.ListOffsets.Int16():      {1, 8},
	kmsg.Metadata.Int16():         {0, 12},
	kmsg.ApiVersions.Int16():      {0, 4},
	kmsg.SASLHandshake.Int16():    {0, 1},
	kmsg.SASLAuthenticate.Int16(): {0, 2},
	kmsg.InitProducerID.Int16():   {0, 5},
	kmsg.DescribeCluster.Int16():  {0, 1},
	kmsg.OffsetForLeaderEpoch.Int16(): {
		2, 4, // v0-v1 carry no current leader epoch; every client sends v2+
	},
	kmsg.CreateTopics.Int16():            {2, 7},
	kmsg.DeleteTopics.Int16():            {1, 6},
	kmsg.CreatePartitions.Int16():        {0, 3},
	kmsg.DescribeConfigs.Int16():         {1, 4},
	kmsg.IncrementalAlterConfigs.Int16(): {0, 1},
	// Consumer groups: KIP-848's protocol and the classic one, offsets
	// and their administration.
	kmsg.FindCoordinator.Int16():        {0, 5},
	kmsg.JoinGroup.Int16():              {0, 9},
	kmsg.SyncGroup.Int16():              {0, 5},
	kmsg.Heartbeat.Int16():              {0, 4},
	kmsg.LeaveGroup.Int16():             {0, 5},
	kmsg.DescribeGroups.Int16():         {0, 5},
	kmsg.OffsetCommit.Int16():           {2, 9}, // v10 names topics by id
	kmsg.OffsetFetch.Int16():            {1, 9}, // v0 read ZooKeeper's offsets
	kmsg.ConsumerGroupHeartbeat.Int16(): {0, 1},
	kmsg.ConsumerGroupDescribe.Int16():  {0, 1},
	kmsg.ListGroups.Int16():             {0, 5},
	kmsg.DeleteGroups.Int16():           {0, 2},
	kmsg.OffsetDelete.Int16():           {0, 0},
	// Transactions, before and with KIP-890 part 2 (see Txns).
	// AddPartitionsToTxn v4+ is brokers' own (a batch of transactions).
	kmsg.AddPartitionsToTxn.Int16():   {0, 3},
	kmsg.AddOffsetsToTxn.Int16():      {0, 4},
	kmsg.TxnOffsetCommit.Int16():      {0, 5},
	kmsg.EndTxn.Int16():               {0, 5},
	kmsg.DescribeTransactions.Int16(): {0, 0},
	kmsg.ListTransactions.Int16():     {0, 1}, // v2 filters ids by a Java regular expression
	kmsg.DescribeProducers.Int16():    {0, 0},
}

// supported reports whether key is served at version.
func supported(key, version int16) bool {
	r, ok := versions[key]
	return ok && version >= r[0] && version <= r[1]
}

// header is a request's header (v1, or v2 with tags for a flexible
// request).
type header struct {
	key, version int16
	corr         int32
	clientID     string
}

var errMalformed = errors.New("malformed request")

// parseHeader splits a request frame into its header and body; req is
// the request of the header's key, at its version (nil for a key kmsg
// does not know).
func parseHeader(b []byte) (h header, req kmsg.Request, body []byte, err error) {
	if len(b) < 10 {
		return h, nil, nil, fmt.Errorf("%w: %d bytes, less than a request header", errMalformed, len(b))
	}
	h.key = int16(binary.BigEndian.Uint16(b[0:]))
	h.version = int16(binary.BigEndian.Uint16(b[2:]))
	h.corr = int32(binary.BigEndian.Uint32(b[4:]))
	n := int16(binary.BigEndian.Uint16(b[8:]))
	b = b[10:]
	if n > 0 {
		if int(n) > len(b) {
			return h, nil, nil, fmt.Errorf("%w: client id of %d bytes, %d left", errMalformed, n, len(b))
		}
		h.clientID, b = string(b[:n]), b[n:]
	} else if n < -1 {
		return h, nil, nil, fmt.Errorf("%w: client id length %d", errMalformed, n)
	}
	req = kmsg.RequestForKey(h.key)
	if req == nil {
		return h, nil, b, nil
	}
	req.SetVersion(h.version)
	if req.IsFlexible() && h.version <= req.MaxVersion() {
		if b, err = skipTags(b); err != nil {
			return h, nil, nil, err
		}
	}
	return h, req, b, nil
}

// skipTags skips a tagged-field section.
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: tagged fields", errMalformed)
	}
	b = b[k:]
	for range n {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, fmt.Errorf("%w: tag", errMalformed)
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: tag size", errMalformed)
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// errClose closes the connection (after writing what was answered).
var errClose = errors.New("close the connection")

// handle serves one frame: it returns the answer frame to write (none
// for an acks=0 produce) and how long to read nothing more (KIP-219), or
// an error that closes the connection (after the answer, when there is
// one).
func (c *conn) handle(ctx context.Context, b []byte) (answer []byte, mute time.Duration, err error) {
	if c.sess.rawToken {
		return c.rawSASL(ctx, b)
	}
	h, req, body, err := parseHeader(b)
	if err != nil {
		c.s.metrics.request(h.key, h.version, "malformed")
		return nil, 0, err
	}
	if h.key == kmsg.ApiVersions.Int16() && (req == nil || !supported(h.key, h.version)) {
		// KIP-511: answer v0 with UNSUPPORTED_VERSION and our ranges,
		// so the client retries with a version we have.
		c.s.metrics.request(h.key, h.version, "unsupported_version")
		res := c.apiVersions(kmsg.NewPtrApiVersionsRequest())
		res.ErrorCode = kerr.UnsupportedVersion.Code
		res.SetVersion(0)
		return answerFrame(h.corr, false, res), 0, nil
	}
	if req == nil || !supported(h.key, h.version) {
		c.s.metrics.request(h.key, h.version, "unsupported_version")
		return nil, 0, fmt.Errorf("API key %d (%s) version %d is not served", h.key, kmsg.NameForKey(h.key), h.version)
	}
	sasl := h.key == kmsg.SASLHandshake.Int16() || h.key == kmsg.SASLAuthenticate.Int16()
	if !sasl && h.key != kmsg.ApiVersions.Int16() {
		if !c.sess.authenticated() {
			c.s.metrics.request(h.key, h.version, "unauthenticated")
			return nil, 0, fmt.Errorf("%s before authentication: this listener needs SASL (PLAIN or OAUTHBEARER)", kmsg.NameForKey(h.key))
		}
		if err := c.sess.check(c.s); err != nil {
			// KIP-368: an expired session, or a revoked key or a
			// suspended tenant, ends the connection; the client's
			// next authentication tells it why.
			c.s.metrics.request(h.key, h.version, "session_ended")
			return nil, 0, err
		}
	}
	if err := req.ReadFrom(body); err != nil {
		c.s.metrics.request(h.key, h.version, "malformed")
		return nil, 0, fmt.Errorf("%w: %s v%d: %w", errMalformed, kmsg.NameForKey(h.key), h.version, err)
	}
	ctx = c.sess.context(ctx)
	if !sasl && h.key != kmsg.ApiVersions.Int16() {
		if err := c.admit(ctx, h.key, len(body)); err != nil {
			c.s.metrics.request(h.key, h.version, "refused")
			return nil, 0, err
		}
	}
	start := time.Now()
	res, mute, err := c.dispatch(ctx, h, req)
	if err != nil {
		c.s.metrics.request(h.key, h.version, "error")
		return nil, 0, err
	}
	c.s.metrics.observe(h.key, time.Since(start))
	if res == nil { // acks=0 produce: no answer
		c.s.metrics.request(h.key, h.version, "ok")
		return nil, mute, nil
	}
	c.s.metrics.request(h.key, h.version, "ok")
	flex := res.IsFlexible() && h.key != kmsg.ApiVersions.Int16()
	answer = answerFrame(h.corr, flex, res)
	if sasl && c.sess.closeAfter {
		return answer, 0, errClose
	}
	return answer, mute, nil
}

// admit charges the request to its tenant's request quota (and bills
// it), holding it while the tenant is over its rate: the connection reads
// nothing meanwhile, as Kafka mutes a throttled channel (KIP-219), so a
// client is slowed, never refused, by its quota. It gives up with the
// connection.
func (c *conn) admit(ctx context.Context, key int16, size int) error {
	if c.s.d.AdmitCall == nil {
		return nil
	}
	p, _ := tenants.PrincipalFrom(ctx)
	kind := admission.CallOther
	switch key {
	case kmsg.Produce.Int16():
		kind = admission.CallProduce
	case kmsg.Fetch.Int16():
		kind = admission.CallFetch
	}
	for {
		err := c.s.d.AdmitCall(ctx, admission.Call{Principal: p, Kind: kind, Size: int64(size)})
		wait, ok := retryAfter(err)
		if !ok {
			return err
		}
		c.s.metrics.throttled(p.TenantID, wait)
		if err := clock.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// retryAfter is the delay of a rate refusal (a domain error with
// RetryAfter or Throttle); ok is false for anything else, nil included.
func retryAfter(err error) (time.Duration, bool) {
	var e *derr.Error
	if err == nil || !errors.As(err, &e) || (e.RetryAfter <= 0 && e.Throttle <= 0) {
		return 0, false
	}
	return max(e.RetryAfter, e.Throttle, time.Millisecond), true
}

// dispatch serves a decoded request; a nil response is not answered.
func (c *conn) dispatch(ctx context.Context, h header, req kmsg.Request) (kmsg.Response, time.Duration, error) {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		return c.apiVersions(r), 0, nil
	case *kmsg.SASLHandshakeRequest:
		return c.saslHandshake(r), 0, nil
	case *kmsg.SASLAuthenticateRequest:
		return c.saslAuthenticate(ctx, r), 0, nil
	case *kmsg.MetadataRequest:
		return c.metadata(ctx, r), 0, nil
	case *kmsg.ProduceRequest:
		res := c.produce(ctx, r)
		if r.Acks == 0 {
			// No answer to tell the client; as Kafka does, a refused
			// acks=0 produce closes the connection, so the client
			// refreshes its metadata and sends again.
			if err := produceRefused(res); err != nil {
				return nil, 0, err
			}
			return nil, 0, nil
		}
		return res, 0, nil
	case *kmsg.FetchRequest:
		res, mute := c.fetch(ctx, r)
		return res, mute, nil
	case *kmsg.ListOffsetsRequest:
		return c.listOffsets(ctx, r), 0, nil
	case *kmsg.InitProducerIDRequest:
		return c.initProducerID(ctx, r), 0, nil
	case *kmsg.OffsetForLeaderEpochRequest:
		return c.offsetForLeaderEpoch(ctx, r), 0, nil
	case *kmsg.DescribeClusterRequest:
		return c.describeCluster(r), 0, nil
	case *kmsg.CreateTopicsRequest:
		return c.createTopics(ctx, r), 0, nil
	case *kmsg.DeleteTopicsRequest:
		return c.deleteTopics(ctx, r), 0, nil
	case *kmsg.CreatePartitionsRequest:
		return c.createPartitions(ctx, r), 0, nil
	case *kmsg.DescribeConfigsRequest:
		return c.describeConfigs(ctx, r), 0, nil
	case *kmsg.IncrementalAlterConfigsRequest:
		return c.incrementalAlterConfigs(ctx, r), 0, nil
	case *kmsg.FindCoordinatorRequest:
		return c.findCoordinator(ctx, r), 0, nil
	case *kmsg.OffsetCommitRequest:
		return c.offsetCommit(ctx, r), 0, nil
	case *kmsg.OffsetFetchRequest:
		return c.offsetFetch(ctx, r), 0, nil
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return c.consumerGroupHeartbeat(ctx, r), 0, nil
	case *kmsg.ConsumerGroupDescribeRequest:
		return c.consumerGroupDescribe(ctx, r), 0, nil
	case *kmsg.ListGroupsRequest:
		return c.listGroups(ctx, r), 0, nil
	case *kmsg.DeleteGroupsRequest:
		return c.deleteGroups(ctx, r), 0, nil
	case *kmsg.OffsetDeleteRequest:
		return c.offsetDelete(ctx, r), 0, nil
	case *kmsg.JoinGroupRequest:
		return c.joinGroup(ctx, h.clientID, r), 0, nil
	case *kmsg.SyncGroupRequest:
		return c.syncGroup(ctx, r), 0, nil
	case *kmsg.HeartbeatRequest:
		return c.heartbeat(ctx, r), 0, nil
	case *kmsg.LeaveGroupRequest:
		return c.leaveGroup(ctx, r), 0, nil
	case *kmsg.DescribeGroupsRequest:
		return c.describeGroups(ctx, r), 0, nil
	case *kmsg.AddPartitionsToTxnRequest:
		return c.addPartitionsToTxn(ctx, r), 0, nil
	case *kmsg.AddOffsetsToTxnRequest:
		return c.addOffsetsToTxn(ctx, r), 0, nil
	case *kmsg.TxnOffsetCommitRequest:
		return c.txnOffsetCommit(ctx, r), 0, nil
	case *kmsg.EndTxnRequest:
		return c.endTxn(ctx, r), 0, nil
	case *kmsg.DescribeTransactionsRequest:
		return c.describeTransactions(ctx, r), 0, nil
	case *kmsg.ListTransactionsRequest:
		return c.listTransactions(ctx, r), 0, nil
	case *kmsg.DescribeProducersRequest:
		return c.describeProducers(ctx, r), 0, nil
	}
	return nil, 0, fmt.Errorf("%s is not served", kmsg.NameForKey(h.key))
}

// transactionVersion is the transaction.version feature every broker
// finalizes (KIP-1022): 2 is KIP-890 part 2, which clients that know it
// (Kafka's Java client 4.0+, franz-go) then use: Produce v12, EndTxn v5,
// TxnOffsetCommit v5 (see Txns).
const transactionVersion = 2

// produceRefused is an error naming the first refused partition of a
// produce's answer, nil when none was.
func produceRefused(res *kmsg.ProduceResponse) error {
	for _, t := range res.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return fmt.Errorf("acks=0 produce to %s/%d refused: %w", t.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	}
	return nil
}

// apiVersions answers the served keys and versions, and the features
// (v3+).
func (c *conn) apiVersions(req *kmsg.ApiVersionsRequest) *kmsg.ApiVersionsResponse {
	res := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	sf := kmsg.NewApiVersionsResponseSupportedFeature()
	sf.Name, sf.MinVersion, sf.MaxVersion = "transaction.version", 0, transactionVersion
	ff := kmsg.NewApiVersionsResponseFinalizedFeature()
	ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = "transaction.version", transactionVersion, transactionVersion
	res.SupportedFeatures = []kmsg.ApiVersionsResponseSupportedFeature{sf}
	res.FinalizedFeatures = []kmsg.ApiVersionsResponseFinalizedFeature{ff}
	res.FinalizedFeaturesEpoch = 1
	for k := range int16(kmsg.MaxKey + 1) {
		if r, ok := versions[k]; ok {
			ak := kmsg.NewApiVersionsResponseApiKey()
			ak.ApiKey, ak.MinVersion, ak.MaxVersion = k, r[0], r[1]
			res.ApiKeys = append(res.ApiKeys, ak)
		}
	}
	return res
}
