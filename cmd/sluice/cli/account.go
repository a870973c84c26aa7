package cli

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/limit/limitpb"
)

func (a *app) signupCommand() *cobra.Command {
	var email, tenant string
	var save, force bool
	cmd := &cobra.Command{
		Use:   "signup",
		Short: "Create a tenant and its first API key, and save them as a profile",
		Example: `  sluice --profile acme signup --email you@example.com --tenant acme
  sluice signup --endpoint http://cp.example:8080 --email you@example.com --tenant acme --profile acme`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, p, err := a.anonymous()
			if err != nil {
				return err
			}
			if save && !force {
				if exists, err := a.profileExists(a.profile); err != nil {
					return err
				} else if exists {
					return usageError{fmt.Errorf("profile %q already exists in %s: choose another with --profile NAME, or --force to replace it", a.profile, a.configPath)}
				}
			}
			res, err := c.tenant.Signup(cmd.Context(), connect.NewRequest(&sluicev1.SignupRequest{Email: email, TenantName: tenant}))
			if err != nil {
				return fmt.Errorf("sign up: %w", err)
			}
			if save {
				p.APIKey = res.Msg.GetApiKeySecret()
				p.TenantID = res.Msg.GetTenant().GetId()
				if err := saveProfile(a.configPath, a.profile, p); err != nil {
					return err
				}
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			t := res.Msg.GetTenant()
			if err := kv(a.stdout, "tenant", t.GetName(), "tenant id", t.GetId(), "plan", t.GetPlan(),
				"api key id", res.Msg.GetApiKey().GetId(), "api key", res.Msg.GetApiKeySecret()); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, "\nThe API key is shown only once: keep it safe.")
			if save {
				fmt.Fprintf(a.stdout, "Saved as profile %q in %s.\n", a.profile, a.configPath)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&email, "email", "", "your email address")
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant name: 3–63 of a-z, 0-9 and '-', starting with a letter")
	cmd.Flags().BoolVar(&save, "save", true, "save the endpoint and new API key as the --profile profile")
	cmd.Flags().BoolVar(&force, "force", false, "replace the --profile profile if it exists")
	_ = cmd.MarkFlagRequired("email")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

func (a *app) loginCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Check an API key and save it with the endpoint as a profile (file mode 0600)",
		Example: `  sluice login --api-key slk_…
  sluice login --endpoint http://cp.example:8080 --api-key slk_… --profile prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, p, err := a.anonymous()
			if err != nil {
				return err
			}
			if a.apiKey == "" {
				return usageError{fmt.Errorf("--api-key (or $SLUICE_API_KEY) is required")}
			}
			p.APIKey = a.apiKey
			res, err := c.auth.CreateToken(cmd.Context(), connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: p.APIKey}))
			if err != nil {
				return fmt.Errorf("log in at %s: %w", p.Endpoint, err)
			}
			p.TenantID = res.Msg.GetTenantId()
			if err := saveProfile(a.configPath, a.profile, p); err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return kv(a.stdout, "logged in", p.Endpoint, "tenant id", p.TenantID,
				"scopes", strings.Join(res.Msg.GetScopes(), ","), "profile", a.profile+" ("+a.configPath+")")
		},
	}
	return cmd
}

func (a *app) tenantCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "tenant", Short: "Show your tenant"}
	cmd.AddCommand(&cobra.Command{
		Use:   "get",
		Short: "Show your tenant, what it uses now against each limit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.tenant.GetTenant(cmd.Context(), connect.NewRequest(&sluicev1.GetTenantRequest{}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return kv(a.stdout, tenantPairs(res.Msg)...)
		},
	})
	return cmd
}

// tenantPairs is tenant get's table: the tenant, then, for each limit of
// the limit table (its Label), what the tenant holds and does now against
// it ("3 of 10") where there is a usage, then the limits without one. The
// rates are the admitted ones summed over the brokers, as the control
// plane last heard (about a second old).
func tenantPairs(res *sluicev1.GetTenantResponse) []string {
	t, u := res.GetTenant(), res.GetUsage()
	lv, use := limitpb.FromLimits(t.GetLimits()), limitpb.FromUsage(u)
	pairs := []string{"tenant", t.GetName(), "id", t.GetId(), "email", t.GetEmail(), "plan", t.GetPlan(), "status", t.GetStatus()}
	var rest []string
	for _, k := range []limit.Kind{limit.Count, limit.Holding, limit.Rate, limit.Ceiling, limit.Transaction} {
		for _, l := range limit.All() {
			d := l.Def()
			if d.Kind != k {
				continue
			}
			if x, ok := use[l]; ok {
				v := fmtLimit(d, x, true) + " of " + fmtLimit(d, float64(lv[l]), false)
				if l == limit.MaxTotalStorageBytes {
					v += fmt.Sprintf(" (hot %s, cold %s)", fmtBytes(float64(u.GetHotStorageBytes())), fmtBytes(float64(u.GetColdStorageBytes())))
				}
				pairs = append(pairs, d.Label, v)
				continue
			}
			rest = append(rest, d.Label, fmtLimit(d, float64(lv[l]), false))
		}
	}
	return append(pairs, rest...)
}

// fmtLimit writes a limit's value, or a usage of it, in its unit: "3",
// "1.00 MiB/s", "12.5/s", "7d", "10.0 GiB (a partition's retention.bytes)".
// A usage of a rate of things is written with one decimal.
func fmtLimit(d limit.Def, x float64, usage bool) string {
	per := ""
	if d.Kind == limit.Rate {
		per = "/" + d.PerName()
	}
	switch {
	case d.Unit == limit.Milliseconds:
		return fmtMsDuration(int64(x))
	case d.Name == limit.MaxStorageBytes.String():
		return fmtBytes(x) + " (a partition's retention.bytes)"
	case d.Name == limit.MaxMessageBytes.String():
		return fmt.Sprintf("%d (%s)", int64(x), fmtBytes(x))
	case d.Unit == limit.Bytes:
		return fmtBytes(x) + per
	case usage && d.Kind == limit.Rate:
		return fmtDecimal(x, 1) + per
	}
	return fmt.Sprintf("%d", int64(x)) + per
}

func (a *app) apikeyCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "apikey", Short: "Create, list and revoke API keys"}
	var name string
	var scopes []string
	create := &cobra.Command{
		Use:     "create",
		Short:   "Create an API key (its secret is printed once)",
		Example: "  sluice apikey create --name ci --scope produce --scope consume",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.apikey.CreateAPIKey(cmd.Context(), connect.NewRequest(&sluicev1.CreateAPIKeyRequest{Name: name, Scopes: scopes}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			k := res.Msg.GetApiKey()
			if err := kv(a.stdout, "id", k.GetId(), "name", k.GetName(), "scopes", strings.Join(k.GetScopes(), ","), "secret", res.Msg.GetSecret()); err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, "\nThe secret is shown only once: keep it safe.")
			return err
		},
	}
	create.Flags().StringVar(&name, "name", "", "a label for the key")
	create.Flags().StringSliceVar(&scopes, "scope", nil, "scope to grant: admin, produce, consume (repeatable; default: yours)")
	_ = create.MarkFlagRequired("name")

	list := &cobra.Command{
		Use:   "list",
		Short: "List API keys (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.apikey.ListAPIKeys(cmd.Context(), connect.NewRequest(&sluicev1.ListAPIKeysRequest{}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			var rows [][]string
			for _, k := range res.Msg.GetApiKeys() {
				state := "active"
				if k.GetRevokeTime() != nil {
					state = "revoked " + fmtTime(k.GetRevokeTime())
				}
				rows = append(rows, []string{k.GetId(), k.GetName(), strings.Join(k.GetScopes(), ","), fmtTime(k.GetCreateTime()), state})
			}
			return table(a.stdout, []string{"ID", "NAME", "SCOPES", "CREATED", "STATE"}, rows)
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.apikey.RevokeAPIKey(cmd.Context(), connect.NewRequest(&sluicev1.RevokeAPIKeyRequest{Id: args[0]}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			_, err = fmt.Fprintf(a.stdout, "revoked %s at %s\n", res.Msg.GetApiKey().GetId(), fmtTime(res.Msg.GetApiKey().GetRevokeTime()))
			return err
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}
