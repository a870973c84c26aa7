// Package cli implements the sluice command line: server commands
// (controlplane, broker, dev) and client commands (signup, login, tenant,
// apikey, topic, produce, consume, group, alerts, webhook).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicemq/sluice/internal/flagenv"
)

// Exit codes scripts can rely on.
const (
	ExitOK       = 0
	ExitError    = 1 // the request failed (the message says why)
	ExitUsage    = 2 // bad flags or arguments
	ExitAuth     = 3 // Unauthenticated or PermissionDenied
	ExitNotFound = 4 // NotFound
	ExitExists   = 5 // AlreadyExists
)

const envPrefix = "SLUICE"

type usageError struct{ error }

// app carries the global options and I/O of one invocation.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	configPath string
	profile    string
	endpoint   string
	apiKey     string
	output     string
	logLevel   string
	logFormat  string
}

// Execute runs the command line and returns the process exit code.
func Execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "sluice:", err)
	if d, ok := retryDelay(err); ok {
		fmt.Fprintf(stderr, "sluice: the server asks to wait %s: retry after %s\n", fmtSpan(d), time.Now().Add(d).Format("15:04:05"))
	}
	var ue usageError
	msg := err.Error()
	// cobra reports bad arguments and missing flags as plain errors.
	if errors.As(err, &ue) || strings.HasPrefix(msg, "unknown command") || strings.Contains(msg, "accepts ") ||
		strings.Contains(msg, "required flag") || strings.HasPrefix(msg, "invalid argument") {
		return ExitUsage
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return ExitAuth
	case connect.CodeNotFound:
		return ExitNotFound
	case connect.CodeAlreadyExists:
		return ExitExists
	}
	return ExitError
}

// retryDelay is the retry delay a server attached to err (a
// google.rpc.RetryInfo detail, as the control plane sends with
// ResourceExhausted), rounded up to the second.
func retryDelay(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if ri, ok := v.(*errdetails.RetryInfo); derr == nil && ok && ri.GetRetryDelay() != nil {
			return max(time.Second, (ri.GetRetryDelay().AsDuration() + time.Second - 1).Truncate(time.Second)), true
		}
	}
	return 0, false
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "sluice",
		Short: "Sluice: a multi-tenant streaming queue",
		Long: `Sluice is a serverless-style, multi-tenant streaming queue.

Run it locally:       sluice dev
Sign up and log in:   sluice signup --email you@example.com --tenant acme
Manage topics:        sluice topic create orders --partitions 6
Consume in a group:   sluice consume orders --group billing
Lag alerts:           sluice alerts list --state firing

Every flag can also be set through an environment variable: --endpoint is
$SLUICE_ENDPOINT, --api-key is $SLUICE_API_KEY, and so on.

Exit codes: 0 ok, 1 error, 2 usage, 3 unauthenticated or permission denied,
4 not found, 5 already exists.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Global flags always read $SLUICE_*; a command's own flags only
			// on server commands (marked envFlags), so $SLUICE_NAME does not
			// silently name an API key.
			sets := []*pflag.FlagSet{cmd.InheritedFlags()}
			if cmd.Annotations[envFlags] == "true" {
				sets = append(sets, cmd.LocalNonPersistentFlags())
			}
			for _, fs := range sets {
				if err := flagenv.Apply(fs, envPrefix); err != nil {
					return usageError{err}
				}
			}
			return a.checkOutput()
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.configPath, "cli-config", defaultConfigPath(), "CLI config file holding profiles (endpoint + API key), mode 0600")
	pf.StringVar(&a.profile, "profile", "default", "profile to use from the config file")
	pf.StringVar(&a.endpoint, "endpoint", "", "control-plane URL, e.g. http://127.0.0.1:8080 (overrides the profile)")
	pf.StringVar(&a.apiKey, "api-key", "", "API key (slk_…) to authenticate with (overrides the profile)")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&a.logLevel, "log-level", "info", "log level for servers: debug, info, warn, error")
	pf.StringVar(&a.logFormat, "log-format", "text", "log format for servers: text or json")

	root.AddCommand(
		a.controlplaneCommand(),
		a.brokerCommand(),
		a.devCommand(),
		a.signupCommand(),
		a.loginCommand(),
		a.tenantCommand(),
		a.apikeyCommand(),
		a.topicCommand(),
		a.produceCommand(),
		a.consumeCommand(),
		a.groupCommand(),
		a.alertsCommand(),
		a.webhookCommand(),
	)
	flagenv.Annotate(root.PersistentFlags(), envPrefix)
	for _, c := range root.Commands() {
		if c.Annotations[envFlags] == "true" {
			flagenv.Annotate(c.Flags(), envPrefix)
		}
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command group below root (topic,
// group, alerts …) answer an unknown subcommand as root does: exit 2 with
// "unknown command" and suggestions. Without arguments a group prints its
// help, as before.
func refuseUnknownSubcommands(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.HasSubCommands() && !c.Runnable() {
			c.Args = unknownSubcommand
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		}
		refuseUnknownSubcommands(c)
	}
}

// unknownSubcommand is the Args of a command group: no arguments, and a
// word that names no subcommand is a usage error worded like cobra's for
// the root.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default for the root
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return usageError{errors.New(msg)}
}

// envFlags marks a command whose own flags have $SLUICE_* fallbacks.
const envFlags = "sluice/env-flags"

func (a *app) checkOutput() error {
	if a.output != "table" && a.output != "json" {
		return usageError{fmt.Errorf("--output must be table or json; got %q", a.output)}
	}
	return nil
}

func (a *app) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(a.logLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level: %w", err)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch a.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(a.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, opts)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format must be text or json; got %q", a.logFormat)}
}

func defaultConfigPath() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ".sluice-cli.json"
	}
	return dir + "/sluice/config.json"
}
