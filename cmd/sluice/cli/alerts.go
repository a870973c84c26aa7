package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// alertService trades the profile's API key for a JWT and returns an
// AlertService client that sends it.
func (a *app) alertService(ctx context.Context) (sluicev1connect.AlertServiceClient, error) {
	p, err := a.resolve(true, false)
	if err != nil {
		return nil, err
	}
	hc, err := httpClient(p.Endpoint, p.CAFile)
	if err != nil {
		return nil, err
	}
	endpoint := strings.TrimRight(p.Endpoint, "/")
	res, err := sluicev1connect.NewAuthServiceClient(hc, endpoint).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: p.APIKey}))
	if err != nil {
		return nil, fmt.Errorf("log in at %s: %w", p.Endpoint, err)
	}
	return sluicev1connect.NewAlertServiceClient(hc, endpoint, connect.WithInterceptors(tenants.Bearer(res.Msg.GetToken()))), nil
}

// alertErr names what failed and says so plainly when the control plane
// predates the AlertService; the Connect code (and so the exit code) is
// kept.
func alertErr(what string, err error) error {
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		return fmt.Errorf("%s: this control plane does not serve lag alerts (AlertService); upgrade it: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// alertKindNames are the kinds as the docs, webhooks and metrics name them.
var alertKindNames = map[sluicev1.AlertKind]string{
	sluicev1.AlertKind_ALERT_KIND_LAG_GROWING:           "lag-growing",
	sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRY_RISK: "retention-expiry-risk",
	sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRED:     "retention-expired",
}

var alertStateNames = map[sluicev1.AlertState]string{
	sluicev1.AlertState_ALERT_STATE_PENDING:  "pending",
	sluicev1.AlertState_ALERT_STATE_FIRING:   "firing",
	sluicev1.AlertState_ALERT_STATE_RESOLVED: "resolved",
}

func fmtAlertKind(k sluicev1.AlertKind) string {
	if s, ok := alertKindNames[k]; ok {
		return s
	}
	return "unknown"
}

func fmtAlertState(s sluicev1.AlertState) string {
	if n, ok := alertStateNames[s]; ok {
		return n
	}
	return "unknown"
}

// parseAlertStates reads --state values (repeatable or comma-separated).
func parseAlertStates(in []string) ([]sluicev1.AlertState, error) {
	var out []sluicev1.AlertState
	for _, s := range in {
		found := false
		for st, name := range alertStateNames {
			if strings.EqualFold(strings.TrimSpace(s), name) {
				out = append(out, st)
				found = true
				break
			}
		}
		if !found {
			return nil, usageError{fmt.Errorf("--state %q: choose pending, firing or resolved", s)}
		}
	}
	return out, nil
}

// fmtSpan writes a duration for people: "24d", "1d6h", "2h5m", "45s".
// Days and hours, hours and minutes, or minutes and seconds: never more
// than two units, truncated.
func fmtSpan(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	const day = 24 * time.Hour
	var s string
	switch {
	case d >= day:
		s = fmt.Sprintf("%dd", d/day)
		if h := (d % day) / time.Hour; h > 0 {
			s += fmt.Sprintf("%dh", h)
		}
	case d >= time.Hour:
		s = fmt.Sprintf("%dh", d/time.Hour)
		if m := (d % time.Hour) / time.Minute; m > 0 {
			s += fmt.Sprintf("%dm", m)
		}
	case d >= time.Minute:
		s = fmt.Sprintf("%dm", d/time.Minute)
		if sec := (d % time.Minute) / time.Second; sec > 0 {
			s += fmt.Sprintf("%ds", sec)
		}
	default:
		s = fmt.Sprintf("%ds", d/time.Second)
	}
	return neg + s
}

// fmtProtoSpan is fmtSpan of d, or "-" when d is not set.
func fmtProtoSpan(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return fmtSpan(d.AsDuration())
}

// fmtGrowth writes a lag-age growth rate in seconds per second and per day.
func fmtGrowth(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "-"
	}
	perDay := time.Duration(math.Abs(r) * float64(24*time.Hour))
	sign := "+"
	if r < 0 {
		sign = "-"
	}
	return fmt.Sprintf("%.3f s/s (%s%s per day)", r, sign, fmtSpan(perDay))
}

func fmtTimeIn(t *timestamppb.Timestamp, loc *time.Location) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().In(loc).Format(time.RFC3339)
}

// lostRange writes a retention-expired alert's lost offsets, or "-".
func lostRange(al *sluicev1.Alert) string {
	if al.GetLostRecords() <= 0 && al.GetLostToOffset() <= al.GetLostFromOffset() {
		return "-"
	}
	return fmt.Sprintf("offsets %d to %d (%s)", al.GetLostFromOffset(), al.GetLostToOffset()-1, plural(al.GetLostRecords(), "record"))
}

// alertRows are the list table's rows.
var alertHeader = []string{"ID", "KIND", "STATE", "GROUP", "TOPIC", "PARTITION", "LAG", "LAG-AGE", "TIME-TO-LOSS", "UPDATED"}

func alertRows(alerts []*sluicev1.Alert, loc *time.Location) [][]string {
	rows := make([][]string, 0, len(alerts))
	for _, al := range alerts {
		ttl := "-"
		if al.GetKind() == sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRY_RISK {
			ttl = fmtProtoSpan(al.GetTimeToDataLoss())
		}
		rows = append(rows, []string{al.GetId(), fmtAlertKind(al.GetKind()), fmtAlertState(al.GetState()), al.GetGroup(), al.GetTopic(),
			strconv.Itoa(int(al.GetPartition())), strconv.FormatInt(al.GetLagMessages(), 10), fmtProtoSpan(al.GetLagAge()), ttl,
			fmtTimeIn(al.GetUpdateTime(), loc)})
	}
	return rows
}

// writeAlert writes every field of an alert as "key: value" lines.
func writeAlert(w io.Writer, al *sluicev1.Alert, loc *time.Location) error {
	retention := "-"
	if d := al.GetRetention(); d != nil && d.AsDuration() > 0 {
		retention = fmtSpan(d.AsDuration())
	}
	return kv(w,
		"id", al.GetId(),
		"kind", fmtAlertKind(al.GetKind()),
		"state", fmtAlertState(al.GetState()),
		"group", al.GetGroup(),
		"topic", al.GetTopic(),
		"partition", strconv.Itoa(int(al.GetPartition())),
		"created", fmtTimeIn(al.GetCreateTime(), loc),
		"fired", fmtTimeIn(al.GetFireTime(), loc),
		"resolved", fmtTimeIn(al.GetResolveTime(), loc),
		"updated", fmtTimeIn(al.GetUpdateTime(), loc),
		"lag", plural(al.GetLagMessages(), "record"),
		"lag age", fmtProtoSpan(al.GetLagAge()),
		"growth rate", fmtGrowth(al.GetLagAgeGrowthRate()),
		"time to data loss", fmtProtoSpan(al.GetTimeToDataLoss()),
		"expires", fmtTimeIn(al.GetExpireTime(), loc),
		"retention", retention,
		"lost", lostRange(al),
		"summary", al.GetSummary(),
		"advice", al.GetAdvice(),
	)
}

func writePolicy(w io.Writer, p *sluicev1.AlertPolicy) error {
	return kv(w, "expiry risk threshold", fmtProtoSpan(p.GetExpiryRiskThreshold()))
}

var webhookHeader = []string{"ID", "URL", "DESCRIPTION", "CREATED"}

func webhookRows(hooks []*sluicev1.Webhook, loc *time.Location) [][]string {
	rows := make([][]string, 0, len(hooks))
	for _, h := range hooks {
		desc := h.GetDescription()
		if desc == "" {
			desc = "-"
		}
		rows = append(rows, []string{h.GetId(), h.GetUrl(), desc, fmtTimeIn(h.GetCreateTime(), loc)})
	}
	return rows
}

var deliveryHeader = []string{"ID", "EVENT", "ALERT", "ALERT-STATE", "STATUS", "ATTEMPTS", "CREATED", "DELIVERED", "NEXT-ATTEMPT", "LAST-ERROR"}

func deliveryRows(ds []*sluicev1.WebhookDelivery, loc *time.Location) [][]string {
	rows := make([][]string, 0, len(ds))
	for _, d := range ds {
		lastErr := d.GetLastError()
		if lastErr == "" {
			lastErr = "-"
		}
		// An event that is not an alert's (a test, invoice.finalized) has
		// no alert or alert state.
		event, alert, state := d.GetEvent(), d.GetAlertId(), "-"
		if event == "" {
			event = "alert" // a server from before events had names
		}
		if alert == "" {
			alert = "-"
		}
		if d.GetAlertState() != sluicev1.AlertState_ALERT_STATE_UNSPECIFIED {
			state = fmtAlertState(d.GetAlertState())
		}
		rows = append(rows, []string{d.GetId(), event, alert, state, d.GetStatus(), strconv.Itoa(int(d.GetAttempts())),
			fmtTimeIn(d.GetCreateTime(), loc), fmtTimeIn(d.GetDeliverTime(), loc), fmtTimeIn(d.GetNextAttemptTime(), loc), lastErr})
	}
	return rows
}

// writeCreatedWebhook writes a new webhook and its signing secret, once.
func writeCreatedWebhook(w io.Writer, res *sluicev1.CreateWebhookResponse, loc *time.Location) error {
	h := res.GetWebhook()
	desc := h.GetDescription()
	if desc == "" {
		desc = "-"
	}
	if err := kv(w, "id", h.GetId(), "url", h.GetUrl(), "description", desc, "created", fmtTimeIn(h.GetCreateTime(), loc),
		"signing secret", res.GetSigningSecret()); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, `
The signing secret is shown only once: keep it safe. Each delivery carries
Sluice-Signature, the hex HMAC-SHA256 of "<Sluice-Timestamp>.<body>" keyed
with it (docs/alerts.md shows how to verify it).`)
	return err
}

// writeTestResult writes what the endpoint answered to a test event and
// returns an error when it did not accept it.
func writeTestResult(w io.Writer, id string, res *sluicev1.TestWebhookResponse) error {
	status := "-"
	if res.GetStatusCode() != 0 {
		status = strconv.Itoa(int(res.GetStatusCode()))
	}
	errText := res.GetError()
	if errText == "" {
		errText = "-"
	}
	if err := kv(w, "webhook", id, "status", status, "latency", fmtLatency(res.GetLatency()), "error", errText); err != nil {
		return err
	}
	return testFailure(id, res)
}

// testFailure is the error of a test delivery the endpoint did not accept
// (no 2xx), or nil.
func testFailure(id string, res *sluicev1.TestWebhookResponse) error {
	code := res.GetStatusCode()
	if res.GetError() == "" && code >= 200 && code <= 299 {
		return nil
	}
	why := res.GetError()
	if why == "" {
		why = fmt.Sprintf("endpoint answered HTTP %d", code)
	}
	return fmt.Errorf("test delivery to webhook %s failed: %s", id, why)
}

func fmtLatency(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return fmtDuration(d.AsDuration().Round(time.Millisecond))
}

func idArg(what string, args []string) (string, error) {
	if strings.TrimSpace(args[0]) == "" {
		return "", usageError{fmt.Errorf("%s id must not be empty", what)}
	}
	return args[0], nil
}

// checkWebhookURL catches URLs the control plane cannot use before asking
// it; it alone decides the rest (https://, or http:// to loopback when it
// allows that).
func checkWebhookURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return usageError{fmt.Errorf("webhook URL %q: want https://host/path", s)}
	}
	return nil
}

const alertsLong = `The control plane samples every consumer group × partition (every
--lag-sample-interval, 30 s by default), forecasts when the oldest
unconsumed record will be deleted by retention, and raises alerts:

  lag-growing             the age of the oldest unconsumed record keeps growing
  retention-expiry-risk   it will be deleted within the threshold (24 h unless
                          changed with sluice alerts policy set)
  retention-expired       unconsumed records were deleted (with the offsets)

Each goes pending → firing → resolved. Firing and resolved alerts are also
POSTed, signed, to the tenant's webhooks (sluice webhook). See
docs/alerts.md for the arithmetic and what to do.

Exit codes: 0 ok, 1 error, 2 usage, 3 unauthenticated or not allowed
(changing the policy needs the admin scope), 4 no such alert.`

func (a *app) alertsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "alerts",
		Short: "List and describe lag and retention-expiry alerts; set the threshold",
		Long:  alertsLong,
	}

	var states []string
	var group string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's alerts, newest first",
		Long: `list shows the tenant's alerts, newest first: kind, state, the group ×
partition, the lag in records, the age of the oldest unconsumed record and,
for retention-expiry-risk, the time to data loss. Resolved alerts are kept
for a while.

-o json prints the whole response; 64-bit numbers are strings there.`,
		Example: `  sluice alerts list
  sluice alerts list --state firing
  sluice alerts list --state pending,firing --group billing -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := parseAlertStates(states)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("group") && group == "" {
				return usageError{errors.New("--group: the group name must not be empty")}
			}
			as, err := a.alertService(cmd.Context())
			if err != nil {
				return err
			}
			all := &sluicev1.ListAlertsResponse{}
			token := ""
			for {
				res, err := as.ListAlerts(cmd.Context(), connect.NewRequest(&sluicev1.ListAlertsRequest{States: st, Group: group, PageToken: token}))
				if err != nil {
					return alertErr("list alerts", err)
				}
				all.Alerts = append(all.Alerts, res.Msg.GetAlerts()...)
				if token = res.Msg.GetNextPageToken(); token == "" {
					break
				}
			}
			if a.output == "json" {
				return printJSON(a.stdout, all)
			}
			return table(a.stdout, alertHeader, alertRows(all.GetAlerts(), time.Local))
		},
	}
	list.Flags().StringSliceVar(&states, "state", nil, "only alerts in state `S`: pending, firing or resolved (repeatable or comma-separated; default: all)")
	list.Flags().StringVar(&group, "group", "", "only the alerts of consumer group `G`")

	describe := &cobra.Command{
		Use:   "describe ID",
		Short: "Show every field of one alert: the numbers behind it and what to do",
		Long: `describe shows alert ID: its kind and state; the group, topic and
partition; when it was created, fired, resolved and last updated; the lag
in records, the lag age (the age of the oldest unconsumed record) and how
fast it grows; for retention-expiry-risk the time to data loss and when the
record expires; the topic's retention; for retention-expired the offsets
deleted unconsumed; and a summary and advice in words.

Exit code 4 when no alert has that ID (another tenant's alerts are never
found).`,
		Example: "  sluice alerts describe alr_01J…\n  sluice alerts describe alr_01J… -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := idArg("alert", args)
			if err != nil {
				return err
			}
			as, err := a.alertService(cmd.Context())
			if err != nil {
				return err
			}
			res, err := as.GetAlert(cmd.Context(), connect.NewRequest(&sluicev1.GetAlertRequest{Id: id}))
			if err != nil {
				return alertErr("describe alert "+id, err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return writeAlert(a.stdout, res.Msg.GetAlert(), time.Local)
		},
	}

	getPolicy := func(cmd *cobra.Command, _ []string) error {
		as, err := a.alertService(cmd.Context())
		if err != nil {
			return err
		}
		res, err := as.GetAlertPolicy(cmd.Context(), connect.NewRequest(&sluicev1.GetAlertPolicyRequest{}))
		if err != nil {
			return alertErr("get alert policy", err)
		}
		if a.output == "json" {
			return printJSON(a.stdout, res.Msg)
		}
		return writePolicy(a.stdout, res.Msg.GetPolicy())
	}
	policy := &cobra.Command{
		Use:   "policy",
		Short: "Show (or, with set, change) the tenant's alert thresholds",
		Long: `policy shows the tenant's alert thresholds; policy set changes them.

  expiry risk threshold   retention-expiry-risk fires when the forecast time
                          to data loss is below it (default 24h)`,
		Example: "  sluice alerts policy\n  sluice alerts policy set --expiry-risk-threshold 48h",
		Args:    cobra.NoArgs,
		RunE:    getPolicy,
	}
	get := &cobra.Command{
		Use:     "get",
		Short:   "Show the tenant's alert thresholds",
		Example: "  sluice alerts policy get -o json",
		Args:    cobra.NoArgs,
		RunE:    getPolicy,
	}
	var threshold time.Duration
	set := &cobra.Command{
		Use:   "set --expiry-risk-threshold DURATION",
		Short: "Change the tenant's alert thresholds (admin scope)",
		Long: `set changes the tenant's alert thresholds and prints the new policy. It
needs an API key with the admin scope (exit 3 otherwise).

--expiry-risk-threshold is a Go duration (90m, 48h, 168h) of at least 1m:
retention-expiry-risk fires when the forecast time to data loss is below
it. A longer threshold warns earlier.`,
		Example: "  sluice alerts policy set --expiry-risk-threshold 48h",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if threshold < time.Minute {
				return usageError{fmt.Errorf("--expiry-risk-threshold must be at least 1m; got %s", threshold)}
			}
			as, err := a.alertService(cmd.Context())
			if err != nil {
				return err
			}
			res, err := as.UpdateAlertPolicy(cmd.Context(), connect.NewRequest(&sluicev1.UpdateAlertPolicyRequest{
				Policy: &sluicev1.AlertPolicy{ExpiryRiskThreshold: durationpb.New(threshold)},
			}))
			if err != nil {
				return alertErr("update alert policy", err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return writePolicy(a.stdout, res.Msg.GetPolicy())
		},
	}
	set.Flags().DurationVar(&threshold, "expiry-risk-threshold", 0, "raise retention-expiry-risk when the time to data loss is below this Go `duration` (at least 1m; the default policy is 24h) (required)")
	_ = set.MarkFlagRequired("expiry-risk-threshold")
	policy.AddCommand(get, set)

	cmd.AddCommand(list, describe, policy)
	return cmd
}

func (a *app) webhookCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Register, list, test and delete the webhooks alerts are delivered to",
		Long: `A webhook receives every firing and resolved alert of the tenant as a
signed JSON POST: Sluice-Timestamp (Unix seconds), Sluice-Delivery-Id (the
same for every retry of one alert state change: deduplicate on it) and
Sluice-Signature, the hex HMAC-SHA256 of "<Sluice-Timestamp>.<body>" keyed
with the webhook's signing secret. Failed deliveries are retried with
backoff; a 4xx answer other than 408 and 429 gives up. See docs/alerts.md.

URLs must be https://; http:// only to a loopback address, when the
control plane allows it (sluice dev does).

Exit codes: 0 ok, 1 error (a failed test delivery, for one), 2 usage, 3
unauthenticated or not allowed (create and delete need the admin scope),
4 no such webhook.`,
	}

	var description string
	create := &cobra.Command{
		Use:   "create URL",
		Short: "Register a webhook; prints its id and signing secret (shown only once)",
		Long: `create registers URL as a webhook of the tenant and prints its id and
the signing secret, which is never shown again: keep it where the receiver
can read it. Needs the admin scope.`,
		Example: `  sluice webhook create https://hooks.example.com/sluice --description "on-call pager"
  sluice webhook create http://127.0.0.1:9000/hook     # sluice dev only`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkWebhookURL(args[0]); err != nil {
				return err
			}
			as, err := a.alertService(cmd.Context())
			if err != nil {
				return err
			}
			res, err := as.CreateWebhook(cmd.Context(), connect.NewRequest(&sluicev1.CreateWebhookRequest{Url: args[0], Description: description}))
			if err != nil {
				return alertErr("create webhook", err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return writeCreatedWebhook(a.stdout, res.Msg, time.Local)
		},
	}
	create.Flags().StringVar(&description, "description", "", "a note saying what the webhook is for")

	list := &cobra.Command{
		Use:     "list",
		Short:   "List the tenant's webhooks (never their secrets)",
		Example: "  sluice webhook list\n  sluice webhook list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			as, err := a.alertService(cmd.Context())
			if err != nil {
				return err
			}
			res, err := as.ListWebhooks(cmd.Context(), connect.NewRequest(&sluicev1.ListWebhooksRequest{}))
			if err != nil {
				return alertErr("list webhooks", err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return table(a.stdout, webhookHeader, webhookRows(res.Msg.GetWebhooks(), time.Local))
		},
	}

	del := &cobra.Command{
		Use:     "delete ID",
		Short:   "Delete a webhook and its pending deliveries (admin scope)",
		Example: "  sluice webhook delete whk_01J…",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := idArg("webhook", args)
			if err != nil {
				return err
			}
			as, err := a.alertService(cmd.Context())
			if err != nil {
				return err
			}
			res, err := as.DeleteWebhook(cmd.Context(), connect.NewRequest(&sluicev1.DeleteWebhookRequest{Id: id}))
			if err != nil {
				return alertErr("delete webhook "+id, err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			_, err = fmt.Fprintf(a.stdout, "deleted webhook %s\n", id)
			return err
		},
	}

	test := &cobra.Command{
		Use:   "test ID",
		Short: "Send a signed test event to a webhook now and show what it answered",
		Long: `test sends a signed test event to webhook ID at once (not through the
retrying delivery queue) and prints the endpoint's HTTP status, the latency
and, when it failed, why. Exit code 1 when the endpoint did not answer 2xx.`,
		Example: "  sluice webhook test whk_01J…",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := idArg("webhook", args)
			if err != nil {
				return err
			}
			as, err := a.alertService(cmd.Context())
			if err != nil {
				return err
			}
			res, err := as.TestWebhook(cmd.Context(), connect.NewRequest(&sluicev1.TestWebhookRequest{Id: id}))
			if err != nil {
				return alertErr("test webhook "+id, err)
			}
			if a.output == "json" {
				if err := printJSON(a.stdout, res.Msg); err != nil {
					return err
				}
				return testFailure(id, res.Msg)
			}
			return writeTestResult(a.stdout, id, res.Msg)
		},
	}

	var limit int32
	deliveries := &cobra.Command{
		Use:   "deliveries ID",
		Short: "Show a webhook's delivery log, newest first",
		Long: `deliveries shows webhook ID's deliveries, newest first: the event (alert,
test or invoice.finalized), for an alert the alert and the state change
delivered, the status (pending, delivered or failed), the
attempts so far, when it was created, delivered, or is next tried, and the
last error.`,
		Example: "  sluice webhook deliveries whk_01J…\n  sluice webhook deliveries whk_01J… --limit 20 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := idArg("webhook", args)
			if err != nil {
				return err
			}
			if limit < 0 || limit > 200 {
				return usageError{fmt.Errorf("--limit must be between 1 and 200 (0: the server's default); got %d", limit)}
			}
			as, err := a.alertService(cmd.Context())
			if err != nil {
				return err
			}
			res, err := as.ListWebhookDeliveries(cmd.Context(), connect.NewRequest(&sluicev1.ListWebhookDeliveriesRequest{WebhookId: id, PageSize: limit}))
			if err != nil {
				return alertErr("list deliveries of webhook "+id, err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return table(a.stdout, deliveryHeader, deliveryRows(res.Msg.GetDeliveries(), time.Local))
		},
	}
	deliveries.Flags().Int32Var(&limit, "limit", 0, "show at most `N` deliveries, 1 to 200 (default: the server's, 200)")

	cmd.AddCommand(create, list, del, test, deliveries)
	return cmd
}
