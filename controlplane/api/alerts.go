package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// AlertService: a tenant's lag alerts, its alert policy and its webhooks
// (proto/sluice/v1/alert.proto). Every id is re-resolved under the
// caller's tenant; another tenant's alert, webhook or delivery log is
// NotFound, as a missing one. Webhook URLs pass the sender's address
// policy (alerting.Guard) here, and again when each delivery connects.

const (
	// MaxWebhooksPerTenant bounds a tenant's webhooks.
	MaxWebhooksPerTenant = 10
	// webhookSecretBytes is the size of a webhook's signing secret.
	webhookSecretBytes = 32
	maxAlertPageSize   = 500
	maxDeliveryPage    = 200
	maxGroupBytes      = 1024
)

type alertService struct{ *API }

var alertStates = map[sluicev1.AlertState]store.AlertState{
	sluicev1.AlertState_ALERT_STATE_PENDING:  store.AlertPending,
	sluicev1.AlertState_ALERT_STATE_FIRING:   store.AlertFiring,
	sluicev1.AlertState_ALERT_STATE_RESOLVED: store.AlertResolved,
}

func (s *alertService) ListAlerts(ctx context.Context, req *connect.Request[sluicev1.ListAlertsRequest]) (*connect.Response[sluicev1.ListAlertsResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	q := store.AlertQuery{Group: m.GetGroup()}
	for i, st := range m.GetStates() {
		ss, ok := alertStates[st]
		if !ok {
			return nil, invalid(fmt.Sprintf("states[%d]", i), "%s is not pending, firing or resolved", st)
		}
		q.States = append(q.States, ss)
	}
	if len(q.Group) > maxGroupBytes || !store.PlainText(q.Group) {
		return nil, invalid("group", "must be UTF-8 text of at most %d bytes", maxGroupBytes)
	}
	size, err := pageSize("page_size", m.GetPageSize(), maxAlertPageSize)
	if err != nil {
		return nil, err
	}
	if tok := m.GetPageToken(); tok != "" {
		if q.AfterID, err = decodePageToken(tok); err != nil {
			return nil, err
		}
	}
	q.Limit = size + 1 // one more: is there a next page?
	list, err := s.store.ListAlerts(ctx, p.TenantID, q)
	if errors.Is(err, store.ErrNotFound) {
		return nil, invalid("page_token", "is not a token from this tenant's ListAlerts")
	}
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListAlertsResponse{}
	if len(list) > size {
		list = list[:size]
		res.NextPageToken = encodePageToken(list[size-1].ID)
	}
	for _, a := range list {
		res.Alerts = append(res.Alerts, s.toAlertPB(ctx, a))
	}
	return connect.NewResponse(res), nil
}

func (s *alertService) GetAlert(ctx context.Context, req *connect.Request[sluicev1.GetAlertRequest]) (*connect.Response[sluicev1.GetAlertResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetId()
	if id == "" {
		return nil, invalid("id", "must not be empty")
	}
	a, err := s.store.GetAlert(ctx, p.TenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("alert %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.GetAlertResponse{Alert: s.toAlertPB(ctx, a)}), nil
}

func (s *alertService) GetAlertPolicy(ctx context.Context, _ *connect.Request[sluicev1.GetAlertPolicyRequest]) (*connect.Response[sluicev1.GetAlertPolicyResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	pol, err := s.alertPolicy(ctx, p.TenantID)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.GetAlertPolicyResponse{Policy: pol}), nil
}

// alertPolicy answers the tenant's stored policy, or the defaults.
func (s *alertService) alertPolicy(ctx context.Context, tenantID string) (*sluicev1.AlertPolicy, error) {
	threshold := s.cfg.DefaultExpiryRiskThreshold
	stored, err := s.store.GetAlertPolicy(ctx, tenantID)
	switch {
	case err == nil:
		threshold = stored.ExpiryRiskThreshold
	case !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	return &sluicev1.AlertPolicy{ExpiryRiskThreshold: durationpb.New(threshold)}, nil
}

func (s *alertService) UpdateAlertPolicy(ctx context.Context, req *connect.Request[sluicev1.UpdateAlertPolicyRequest]) (*connect.Response[sluicev1.UpdateAlertPolicyResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	pol := req.Msg.GetPolicy()
	if pol == nil {
		return nil, invalid("policy", "is required")
	}
	const field = "policy.expiry_risk_threshold"
	dpb := pol.GetExpiryRiskThreshold()
	if dpb == nil {
		return nil, invalid(field, "is required")
	}
	if err := dpb.CheckValid(); err != nil {
		return nil, invalid(field, "%v", err)
	}
	d := dpb.AsDuration()
	switch {
	case d < store.MinExpiryRiskThreshold || d > store.MaxExpiryRiskThreshold:
		return nil, invalid(field, "must be between %s and %s (90 days); got %s", store.MinExpiryRiskThreshold, store.MaxExpiryRiskThreshold, d)
	case d%time.Millisecond != 0:
		return nil, invalid(field, "must be whole milliseconds; got %s", d)
	}
	stored, err := s.store.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: p.TenantID, ExpiryRiskThreshold: d, UpdatedAt: s.now()})
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "alert policy updated", "tenant", p.TenantID, "expiry_risk_threshold", stored.ExpiryRiskThreshold)
	return connect.NewResponse(&sluicev1.UpdateAlertPolicyResponse{Policy: &sluicev1.AlertPolicy{ExpiryRiskThreshold: durationpb.New(stored.ExpiryRiskThreshold)}}), nil
}

func (s *alertService) CreateWebhook(ctx context.Context, req *connect.Request[sluicev1.CreateWebhookRequest]) (*connect.Response[sluicev1.CreateWebhookResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	u, desc := req.Msg.GetUrl(), req.Msg.GetDescription()
	switch {
	case u == "":
		return nil, invalid("url", "must not be empty")
	case len(u) > store.MaxWebhookURLBytes:
		return nil, invalid("url", "is longer than %d bytes", store.MaxWebhookURLBytes)
	case !store.PlainText(u):
		return nil, invalid("url", "is not UTF-8 text")
	case len(desc) > store.MaxWebhookDescriptionBytes || !store.PlainText(desc):
		return nil, invalid("description", "must be UTF-8 text of at most %d bytes", store.MaxWebhookDescriptionBytes)
	}
	if err := s.webhooks.Guard().CheckURL(ctx, u); err != nil {
		return nil, invalid("url", "%v", err)
	}
	secret := make([]byte, webhookSecretBytes)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("generate webhook secret: %w", err)
	}
	// The key is the secret as the tenant receives it (its hex text), so a
	// receiver verifies with the string it was given, as is.
	text := hex.EncodeToString(secret)
	w, err := s.store.CreateWebhook(ctx, store.Webhook{TenantID: p.TenantID, URL: u, Description: desc, CreatedAt: s.now()}, []byte(text), MaxWebhooksPerTenant)
	var le *store.LimitError
	if errors.As(err, &le) {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("webhook limit reached: a tenant may have %d webhooks; delete one first", le.Max))
	}
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "webhook created", "tenant", p.TenantID, "webhook", w.ID)
	return connect.NewResponse(&sluicev1.CreateWebhookResponse{Webhook: toWebhookPB(w), SigningSecret: text}), nil
}

func (s *alertService) ListWebhooks(ctx context.Context, _ *connect.Request[sluicev1.ListWebhooksRequest]) (*connect.Response[sluicev1.ListWebhooksResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	hooks, err := s.store.ListWebhooks(ctx, p.TenantID)
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListWebhooksResponse{}
	for _, w := range hooks {
		res.Webhooks = append(res.Webhooks, toWebhookPB(w))
	}
	return connect.NewResponse(res), nil
}

func (s *alertService) DeleteWebhook(ctx context.Context, req *connect.Request[sluicev1.DeleteWebhookRequest]) (*connect.Response[sluicev1.DeleteWebhookResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetId()
	if id == "" {
		return nil, invalid("id", "must not be empty")
	}
	err = s.store.DeleteWebhook(ctx, p.TenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("webhook %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "webhook deleted", "tenant", p.TenantID, "webhook", id)
	return connect.NewResponse(&sluicev1.DeleteWebhookResponse{}), nil
}

func (s *alertService) TestWebhook(ctx context.Context, req *connect.Request[sluicev1.TestWebhookRequest]) (*connect.Response[sluicev1.TestWebhookResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetId()
	if id == "" {
		return nil, invalid("id", "must not be empty")
	}
	r, err := s.webhooks.TestWebhook(ctx, s.store, p.TenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("webhook %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.TestWebhookResponse{StatusCode: int32(r.Status), Error: r.Error, Latency: durationpb.New(r.Latency)}), nil
}

func (s *alertService) ListWebhookDeliveries(ctx context.Context, req *connect.Request[sluicev1.ListWebhookDeliveriesRequest]) (*connect.Response[sluicev1.ListWebhookDeliveriesResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetWebhookId()
	if id == "" {
		return nil, invalid("webhook_id", "must not be empty")
	}
	size, err := pageSize("page_size", req.Msg.GetPageSize(), maxDeliveryPage)
	if err != nil {
		return nil, err
	}
	log, err := s.store.ListDeliveries(ctx, p.TenantID, id, size)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("webhook %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListWebhookDeliveriesResponse{}
	for _, d := range log {
		res.Deliveries = append(res.Deliveries, toDeliveryPB(d))
	}
	return connect.NewResponse(res), nil
}

// pageSize resolves a requested page size: 0 is max, above max is max,
// negative is invalid.
func pageSize(field string, n int32, max int) (int, error) {
	switch {
	case n < 0:
		return 0, invalid(field, "must not be negative; got %d", n)
	case n == 0 || int(n) > max:
		return max, nil
	}
	return int(n), nil
}

// Page tokens are opaque to clients: the last id of the previous page.
func encodePageToken(lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(lastID))
}

func decodePageToken(tok string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", invalid("page_token", "is not a token from ListAlerts")
	}
	id, ok := store.CanonicalID(string(b))
	if !ok {
		return "", invalid("page_token", "is not a token from ListAlerts")
	}
	return id, nil
}

var alertKindsPB = map[store.AlertKind]sluicev1.AlertKind{
	store.AlertLagGrowing:          sluicev1.AlertKind_ALERT_KIND_LAG_GROWING,
	store.AlertRetentionExpiryRisk: sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRY_RISK,
	store.AlertRetentionExpired:    sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRED,
}

var alertStatesPB = map[store.AlertState]sluicev1.AlertState{
	store.AlertPending:  sluicev1.AlertState_ALERT_STATE_PENDING,
	store.AlertFiring:   sluicev1.AlertState_ALERT_STATE_FIRING,
	store.AlertResolved: sluicev1.AlertState_ALERT_STATE_RESOLVED,
}

// toAlertPB answers an alert with the numbers of its details
// (alerts.Details). Details that do not decode leave the numbers out (and
// are logged): the alert itself is still worth answering.
func (s *alertService) toAlertPB(ctx context.Context, a store.Alert) *sluicev1.Alert {
	out := &sluicev1.Alert{
		Id: a.ID, Kind: alertKindsPB[a.Kind], State: alertStatesPB[a.State],
		Group: a.Group, Topic: a.TopicName, Partition: a.Partition,
		CreateTime: ts(a.CreatedAt), FireTime: ts(a.FiredAt), ResolveTime: ts(a.ResolvedAt), UpdateTime: ts(a.UpdatedAt),
	}
	var d alerts.Details
	if err := json.Unmarshal(a.Details, &d); err != nil {
		s.logger.WarnContext(ctx, "alert details do not decode", "alert", a.ID, "err", err)
		return out
	}
	out.LagMessages = d.Lag
	out.LagAge = durationpb.New(d.LagAge)
	out.LagAgeGrowthRate = d.GrowthRate
	if d.TimeToLoss > 0 {
		out.TimeToDataLoss = durationpb.New(d.TimeToLoss)
	}
	out.ExpireTime = ts(d.ExpiresAt)
	if d.Retention > 0 {
		out.Retention = durationpb.New(d.Retention)
	}
	out.LostFromOffset, out.LostToOffset, out.LostRecords = d.LostFrom, d.LostTo, d.LostCount
	out.Summary, out.Advice = d.Summary, d.Advice
	return out
}

func toWebhookPB(w store.Webhook) *sluicev1.Webhook {
	return &sluicev1.Webhook{Id: w.ID, Url: w.URL, Description: w.Description, CreateTime: ts(w.CreatedAt)}
}

// toDeliveryPB answers a delivery; a webhook test and an invoice event
// have no alert id and the unspecified alert state.
func toDeliveryPB(d store.Delivery) *sluicev1.WebhookDelivery {
	out := &sluicev1.WebhookDelivery{
		Id: d.ID, AlertId: d.AlertID, AlertState: alertStatesPB[d.AlertState], Status: string(d.Status),
		Attempts: d.Attempts, LastError: d.LastError, CreateTime: ts(d.CreatedAt), DeliverTime: ts(d.DeliveredAt),
		Event: "alert",
	}
	if d.AlertState.Event() {
		out.Event = string(d.AlertState)
	}
	if d.Status == store.DeliveryPending {
		out.NextAttemptTime = ts(d.NextAttemptAt)
	}
	return out
}
