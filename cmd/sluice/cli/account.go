package cli

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
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

// tenantPairs is tenant get's table: the tenant, then what it holds and
// does now against each limit ("3 of 10"), then the limits without a
// usage beside them. The rates are the admitted ones summed over the
// brokers, as the control plane last heard (about a second old).
func tenantPairs(res *sluicev1.GetTenantResponse) []string {
	t, l, u := res.GetTenant(), res.GetTenant().GetLimits(), res.GetUsage()
	of := func(use, limit string) string { return use + " of " + limit }
	rate := func(bytesPerSec float64) string { return fmtBytes(bytesPerSec) + "/s" }
	return []string{"tenant", t.GetName(), "id", t.GetId(), "email", t.GetEmail(), "plan", t.GetPlan(), "status", t.GetStatus(),
		"topics", fmt.Sprintf("%d of %d", u.GetTopics(), l.GetMaxTopics()),
		"partitions", fmt.Sprintf("%d of %d", u.GetPartitions(), l.GetMaxPartitions()),
		"storage", of(fmtBytes(float64(u.GetStorageBytes())), fmtBytes(float64(l.GetMaxTotalStorageBytes()))) +
			fmt.Sprintf(" (hot %s, cold %s)", fmtBytes(float64(u.GetHotStorageBytes())), fmtBytes(float64(u.GetColdStorageBytes()))),
		"groups", fmt.Sprintf("%d of %d", u.GetGroups(), l.GetMaxGroups()),
		"transactional ids", fmt.Sprintf("%d of %d", u.GetTransactionalIds(), l.GetMaxTransactionalIds()),
		"produce", of(rate(u.GetProduceBytesPerSec()), rate(float64(l.GetProduceBytesPerSec()))),
		"fetch", of(rate(u.GetFetchBytesPerSec()), rate(float64(l.GetFetchBytesPerSec()))),
		"requests", of(fmtDecimal(u.GetRequestsPerSec(), 1)+"/s", fmt.Sprintf("%d/s", l.GetRequestsPerSec())),
		"new producer ids", of(fmtDecimal(u.GetProducerIdsPerHour(), 1)+"/hour", fmt.Sprintf("%d/hour", l.GetProducerIdsPerHour())),
		"max retention", fmtMsDuration(l.GetMaxRetentionMs()),
		"max partition bytes", fmtBytes(float64(l.GetMaxStorageBytes())) + " (a partition's retention.bytes)",
		"max message bytes", fmt.Sprintf("%d (%s)", l.GetMaxMessageBytes(), fmtBytes(float64(l.GetMaxMessageBytes()))),
	}
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
