package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/limit/limitpb"
	"github.com/sluicemq/sluice/tenants"
)

// operatorTokenUsage is the help of a client command's --operator-token.
const operatorTokenUsage = "the operator credential (the control plane's --operator-token; with sluice dev, operator_token in --data-dir's secrets.json); prefer $SLUICE_OPERATOR_TOKEN to the flag, which other users can see in the process list"

// addOperatorToken registers --operator-token on a command that acts as
// the operator (its variable is $SLUICE_OPERATOR_TOKEN, the same as the
// control plane's).
func addOperatorToken(fs *pflag.FlagSet, token *string) {
	fs.StringVar(token, "operator-token", "", operatorTokenUsage)
}

// operator returns an OperatorService client of the selected endpoint
// (profile or --endpoint) authenticated with the operator credential; no
// API key is needed. what names the option that needs it, for the usage
// error without one.
func (a *app) operator(token, what string) (sluicev1connect.OperatorServiceClient, error) {
	if token == "" {
		return nil, usageError{errors.New(what + " acts as the operator: pass --operator-token or $SLUICE_OPERATOR_TOKEN")}
	}
	p, err := a.resolve(false, false)
	if err != nil {
		return nil, err
	}
	hc, err := httpClient(p.Endpoint, p.CAFile)
	if err != nil {
		return nil, err
	}
	return sluicev1connect.NewOperatorServiceClient(hc, strings.TrimRight(p.Endpoint, "/"), connect.WithInterceptors(tenants.Bearer(token))), nil
}

func (a *app) operatorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the service: tenants' plans, status and limits, plan prices (the operator credential)",
		Long: `Commands for the people running Sluice. They act as the operator, with the
control plane's --operator-token (pass --operator-token or, better,
$SLUICE_OPERATOR_TOKEN); no API key is needed.`,
	}
	tenant := &cobra.Command{Use: "tenant", Short: "List tenants; change a tenant's plan, status and limit overrides"}
	tenant.AddCommand(a.operatorTenantListCommand(), a.operatorTenantUpdateCommand())
	prices := &cobra.Command{Use: "prices", Short: "Show and set the plans' prices"}
	prices.AddCommand(a.operatorPricesGetCommand(), a.operatorPricesSetCommand())
	cmd.AddCommand(tenant, prices)
	return cmd
}

// listAllTenants pages through every tenant.
func listAllTenants(ctx context.Context, op sluicev1connect.OperatorServiceClient) ([]*sluicev1.Tenant, error) {
	var out []*sluicev1.Tenant
	req := &sluicev1.ListTenantsRequest{PageSize: 1000}
	for {
		res, err := op.ListTenants(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, fmt.Errorf("list tenants: %w", err)
		}
		out = append(out, res.Msg.GetTenants()...)
		if res.Msg.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = res.Msg.GetNextPageToken()
	}
}

// findTenant is the tenant with id or name ref.
func findTenant(ctx context.Context, op sluicev1connect.OperatorServiceClient, ref string) (*sluicev1.Tenant, error) {
	ts, err := listAllTenants(ctx, op)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if t.GetId() == ref || t.GetName() == ref {
			return t, nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("tenant %q not found (by id or name)", ref))
}

func (a *app) operatorTenantListCommand() *cobra.Command {
	var token string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List every tenant with its plan, status and limit overrides",
		Example: `  SLUICE_OPERATOR_TOKEN=… sluice operator tenant list`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			op, err := a.operator(token, "operator tenant list")
			if err != nil {
				return err
			}
			ts, err := listAllTenants(cmd.Context(), op)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, &sluicev1.ListTenantsResponse{Tenants: ts})
			}
			var rows [][]string
			for _, t := range ts {
				rows = append(rows, []string{t.GetId(), t.GetName(), t.GetPlan(), t.GetStatus(), fmtTime(t.GetCreateTime()), strings.Join(overrideList(t.GetOverrides()), ",")})
			}
			return table(a.stdout, []string{"ID", "NAME", "PLAN", "STATUS", "CREATED", "OVERRIDES"}, rows)
		},
	}
	addOperatorToken(cmd.Flags(), &token)
	return cmd
}

// limitFlag is a limit's flag: its name with '-' for '_' (max-groups).
func limitFlag(l limit.Limit) string { return strings.ReplaceAll(l.String(), "_", "-") }

// limitHelp is a limit's flag help, from the limit table; limits in bytes
// take byte counts with binary suffixes (10GiB).
func limitHelp(l limit.Limit) string {
	d := l.Def()
	h := d.Help
	if d.Kind == limit.Rate && d.Unit != limit.Bytes && !strings.Contains(h, "per ") {
		h += " per " + d.PerName()
	}
	if d.Unit == limit.Bytes {
		h += " (bytes, or 10GiB, 512MiB …)"
	}
	return h
}

// overridesOf reads the overrides of the limits this CLI knows (a newer
// control plane's other limits are left out).
func overridesOf(p *sluicev1.LimitOverrides) limit.Overrides {
	if o, err := limitpb.FromOverrides(p); err == nil {
		return o
	}
	known := proto.Clone(p).(*sluicev1.LimitOverrides)
	for name := range known.Values {
		if _, ok := limit.ByName(name); !ok {
			delete(known.Values, name)
		}
	}
	o, _ := limitpb.FromOverrides(known)
	return o
}

// overrideList names the overrides set in o as flag=value, in table order.
func overrideList(p *sluicev1.LimitOverrides) []string {
	o := overridesOf(p)
	var out []string
	for _, l := range limit.All() {
		if v, ok := o[l]; ok {
			out = append(out, fmt.Sprintf("%s=%d", limitFlag(l), v))
		}
	}
	return out
}

// limitOverrides is the flags of operator tenant update that change
// overrides: one value per limit, which to clear, and clear all.
type limitOverrides struct {
	values   map[limit.Limit]*int64
	clear    []string
	clearAll bool
}

func (lo *limitOverrides) register(fs *pflag.FlagSet) {
	lo.values = map[limit.Limit]*int64{}
	for _, l := range limit.All() {
		v := new(int64)
		lo.values[l] = v
		help := "override: " + limitHelp(l)
		if l.Def().Unit == limit.Bytes {
			fs.Var(bytesValue{v}, limitFlag(l), help)
		} else {
			fs.Int64Var(v, limitFlag(l), 0, help)
		}
	}
	fs.StringSliceVar(&lo.clear, "clear-override", nil, "drop this override, back to the plan's value (repeatable; a limit flag's name, e.g. max-groups)")
	fs.BoolVar(&lo.clearAll, "clear-overrides", false, "drop every override first (the flags given set new ones)")
}

// apply returns the tenant's overrides after the flags (nil when no flag
// touches them: UpdateTenant keeps them then).
func (lo *limitOverrides) apply(fs *pflag.FlagSet, cur *sluicev1.LimitOverrides) (*sluicev1.LimitOverrides, error) {
	touched := lo.clearAll || len(lo.clear) > 0
	for l := range lo.values {
		touched = touched || fs.Changed(limitFlag(l))
	}
	if !touched {
		return nil, nil
	}
	next := &sluicev1.LimitOverrides{}
	if !lo.clearAll && cur != nil {
		next = proto.Clone(cur).(*sluicev1.LimitOverrides)
	}
	byFlag := map[string]limit.Limit{}
	for _, l := range limit.All() {
		byFlag[limitFlag(l)] = l
	}
	for _, name := range lo.clear {
		l, ok := byFlag[strings.TrimPrefix(name, "--")]
		if !ok {
			return nil, usageError{fmt.Errorf("--clear-override %q: not a limit; choose %s", name, strings.Join(slices.Sorted(maps.Keys(byFlag)), ", "))}
		}
		limitpb.ClearOverride(next, l)
	}
	for _, l := range limit.All() {
		name := limitFlag(l)
		if !fs.Changed(name) {
			continue
		}
		v := *lo.values[l]
		if v < 0 {
			return nil, usageError{fmt.Errorf("--%s: must not be negative; got %d", name, v)}
		}
		if m := l.Def().Max; m > 0 && v > m {
			return nil, usageError{fmt.Errorf("--%s: at most %d; got %d", name, m, v)}
		}
		limitpb.SetOverride(next, l, v)
	}
	return next, nil
}

func (a *app) operatorTenantUpdateCommand() *cobra.Command {
	var token, plan, status string
	var lo limitOverrides
	cmd := &cobra.Command{
		Use:   "update TENANT",
		Short: "Change a tenant's plan, status or limit overrides (TENANT: its id or name)",
		Long: `Change a tenant's plan, status or per-tenant limit overrides (OperatorService.UpdateTenant).
TENANT is the tenant's id or name.

Each limit flag sets that override on top of the tenant's current ones
(--clear-overrides first drops them all, --clear-override NAME one); limits
without an override follow the plan. Rates hold for the whole cluster: the
control plane divides them among the brokers.`,
		Example: `  sluice operator tenant update acme --plan pro
  sluice operator tenant update acme --produce-bytes-per-sec 1MiB --max-total-storage-bytes 20GiB
  sluice operator tenant update acme --max-groups 500 --max-transactional-ids 50 --producer-ids-per-hour 100
  sluice operator tenant update acme --clear-override max-groups
  sluice operator tenant update acme --status suspended`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.operator(token, "operator tenant update")
			if err != nil {
				return err
			}
			req := &sluicev1.UpdateTenantRequest{}
			if cmd.Flags().Changed("plan") {
				req.Plan = &plan
			}
			if cmd.Flags().Changed("status") {
				req.Status = &status
			}
			t, err := findTenant(cmd.Context(), op, args[0])
			if err != nil {
				return err
			}
			req.TenantId = t.GetId()
			if req.Overrides, err = lo.apply(cmd.Flags(), t.GetOverrides()); err != nil {
				return err
			}
			if req.Plan == nil && req.Status == nil && req.Overrides == nil {
				return usageError{errors.New("nothing to change: give --plan, --status or a limit flag (see --help)")}
			}
			res, err := op.UpdateTenant(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return fmt.Errorf("update tenant %s: %w", t.GetName(), err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return a.printTenantLimits(res.Msg.GetTenant())
		},
	}
	addOperatorToken(cmd.Flags(), &token)
	cmd.Flags().StringVar(&plan, "plan", "", "the plan: "+strings.Join(tenants.Plans(), " or "))
	cmd.Flags().StringVar(&status, "status", "", "active or suspended (a suspended tenant's calls are refused)")
	lo.register(cmd.Flags())
	return cmd
}

// printTenantLimits writes a tenant's plan and status and each limit in
// force, marking the overridden ones.
func (a *app) printTenantLimits(t *sluicev1.Tenant) error {
	pairs := []string{"tenant", t.GetName(), "id", t.GetId(), "plan", t.GetPlan(), "status", t.GetStatus()}
	lv, o := limitpb.FromLimits(t.GetLimits()), overridesOf(t.GetOverrides())
	for _, l := range limit.All() {
		v := fmt.Sprint(lv[l])
		if _, ok := o[l]; ok {
			v += " (override)"
		}
		pairs = append(pairs, limitFlag(l), v)
	}
	return kv(a.stdout, pairs...)
}

func (a *app) operatorPricesGetCommand() *cobra.Command {
	var token, plan string
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Show every plan's prices per dimension (or one plan's, with --plan)",
		Example: `  sluice operator prices get
  sluice operator prices get --plan pro -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			op, err := a.operator(token, "operator prices get")
			if err != nil {
				return err
			}
			res, err := op.GetPlanPrices(cmd.Context(), connect.NewRequest(&sluicev1.GetPlanPricesRequest{}))
			if err != nil {
				return fmt.Errorf("get plan prices: %w", err)
			}
			if plan != "" {
				res.Msg.Plans = slices.DeleteFunc(res.Msg.Plans, func(p *sluicev1.PlanPrices) bool { return p.GetPlan() != plan })
				if len(res.Msg.Plans) == 0 {
					return connect.NewError(connect.CodeNotFound, fmt.Errorf("plan %q has no prices", plan))
				}
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return a.printPrices(res.Msg.GetPlans()...)
		},
	}
	addOperatorToken(cmd.Flags(), &token)
	cmd.Flags().StringVar(&plan, "plan", "", "only this plan's prices: "+strings.Join(tenants.Plans(), " or "))
	return cmd
}

// printPrices writes plans' prices: per plan and dimension the billing
// unit, its price and the monthly free allowance in billing units.
func (a *app) printPrices(plans ...*sluicev1.PlanPrices) error {
	var rows [][]string
	for _, pp := range plans {
		for _, p := range pp.GetPrices() {
			rows = append(rows, []string{pp.GetPlan(), dimensionName(p.GetDimension()), p.GetUnit(),
				fmtMicros(p.GetUnitPriceMicros()) + " " + pp.GetCurrencyCode(), fmtUnits(p.GetFreeQuantity(), p.GetUnitSize()) + " " + p.GetUnit()})
		}
	}
	return table(a.stdout, []string{"PLAN", "DIMENSION", "UNIT", "UNIT PRICE", "FREE PER MONTH"}, rows)
}

// parsePairs reads a prices set flag's DIMENSION=VALUE pairs, by
// dimension.
func parsePairs(flag string, pairs []string) (map[sluicev1.UsageDimension]string, error) {
	out := map[sluicev1.UsageDimension]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || v == "" {
			return nil, usageError{fmt.Errorf("--%s %q: want DIMENSION=VALUE, such as ingress_bytes=0.09", flag, p)}
		}
		d, err := parseDimension(k)
		if err != nil {
			return nil, usageError{fmt.Errorf("--%s: %w", flag, err)}
		}
		out[d] = v
	}
	return out, nil
}

// pricesRequest builds SetPlanPrices for plan from the current prices
// (each dimension's unit and unit size, and what a flag leaves as it is)
// and the --price and --free values, in billing units.
func pricesRequest(cur *sluicev1.GetPlanPricesResponse, plan string, prices, free []string) (*sluicev1.SetPlanPricesRequest, error) {
	pm, err := parsePairs("price", prices)
	if err != nil {
		return nil, err
	}
	fm, err := parsePairs("free", free)
	if err != nil {
		return nil, err
	}
	if len(pm)+len(fm) == 0 {
		return nil, usageError{errors.New("nothing to set: give --price DIMENSION=PRICE or --free DIMENSION=QUANTITY")}
	}
	var mine *sluicev1.PlanPrices
	known := map[sluicev1.UsageDimension]*sluicev1.Price{} // a price of the dimension on any plan: its unit and size
	for _, pp := range cur.GetPlans() {
		if pp.GetPlan() == plan {
			mine = pp
		}
		for _, p := range pp.GetPrices() {
			if known[p.GetDimension()] == nil {
				known[p.GetDimension()] = p
			}
		}
	}
	if mine == nil {
		return nil, usageError{fmt.Errorf("--plan %q: no such plan (the control plane knows %s)", plan, strings.Join(planNames(cur), ", "))}
	}
	for _, p := range mine.GetPrices() {
		known[p.GetDimension()] = p
	}
	req := &sluicev1.SetPlanPricesRequest{Plan: plan}
	for _, d := range usageDimensions {
		pv, hasP := pm[d.dim]
		fv, hasF := fm[d.dim]
		if !hasP && !hasF {
			continue
		}
		base := known[d.dim]
		if base == nil {
			return nil, fmt.Errorf("dimension %s has no price on any plan to take its unit from", dimensionName(d.dim))
		}
		p := proto.Clone(base).(*sluicev1.Price)
		if hasP {
			if p.UnitPriceMicros, err = parseMicros(pv); err != nil {
				return nil, usageError{fmt.Errorf("--price %s: %w", dimensionName(d.dim), err)}
			}
		}
		if hasF {
			if p.FreeQuantity, err = parseUnits(fv, p.GetUnitSize()); err != nil {
				return nil, usageError{fmt.Errorf("--free %s: %w", dimensionName(d.dim), err)}
			}
		}
		req.Prices = append(req.Prices, p)
	}
	return req, nil
}

func planNames(res *sluicev1.GetPlanPricesResponse) []string {
	var out []string
	for _, pp := range res.GetPlans() {
		out = append(out, pp.GetPlan())
	}
	return out
}

func (a *app) operatorPricesSetCommand() *cobra.Command {
	var token, plan string
	var prices, free []string
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Set a plan's price or free allowance of some dimensions (the others keep theirs)",
		Long: `Set the price per billing unit and the monthly free allowance of dimensions of one
plan (OperatorService.SetPlanPrices). A price is a decimal of the plan's currency
per billing unit (at most 6 decimals, read exactly, never as a float); --free is
in billing units too; each dimension's unit is fixed (operator prices get shows
them). A dimension given only --price keeps its allowance, and only --free its
price. Drafts are recomputed with the new prices; finalized invoices keep theirs.

Dimensions: ` + strings.Join(dimensionNames(), ", ") + `.`,
		Example: `  sluice operator prices set --plan pro --price ingress_bytes=0.09 --price egress_bytes=0.05
  sluice operator prices set --plan free --free ingress_bytes=10 --free partition_seconds=720`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			op, err := a.operator(token, "operator prices set")
			if err != nil {
				return err
			}
			cur, err := op.GetPlanPrices(cmd.Context(), connect.NewRequest(&sluicev1.GetPlanPricesRequest{}))
			if err != nil {
				return fmt.Errorf("get plan prices: %w", err)
			}
			req, err := pricesRequest(cur.Msg, plan, prices, free)
			if err != nil {
				return err
			}
			res, err := op.SetPlanPrices(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return fmt.Errorf("set plan prices: %w", err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return a.printPrices(res.Msg.GetPlan())
		},
	}
	addOperatorToken(cmd.Flags(), &token)
	cmd.Flags().StringVar(&plan, "plan", "", "the plan: "+strings.Join(tenants.Plans(), " or "))
	cmd.Flags().StringSliceVar(&prices, "price", nil, "DIMENSION=PRICE: the price of one billing unit, a decimal of the plan's currency (repeatable)")
	cmd.Flags().StringSliceVar(&free, "free", nil, "DIMENSION=QUANTITY: billing units free each month (repeatable)")
	_ = cmd.MarkFlagRequired("plan")
	return cmd
}
