// Package cli implements the sluice command line: server commands
// (controlplane, broker, dev) and client commands (signup, login, tenant,
// apikey, topic, produce, consume, group, txn, alerts, webhook, bench,
// usage, invoice, operator), version and healthcheck (version.go).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
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
	caFile     string
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
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err)
	var env []string
	if code == ExitUsage {
		// The mistake may be in a variable, not on the command line.
		env = flagenv.FromEnvironment(cmd.Flags())
	}
	delay, hasDelay := retryDelay(err)
	if a.output == "json" || (a.output == "table" && wantsJSON(args)) {
		je := jsonError{Code: connect.CodeOf(err).String(), Message: err.Error(), FromEnvironment: env}
		if code == ExitUsage {
			je.Code = connect.CodeInvalidArgument.String()
		}
		if hasDelay {
			je.RetryDelay = fmt.Sprintf("%ds", int64(delay/time.Second))
		}
		b, _ := json.Marshal(map[string]jsonError{"error": je})
		fmt.Fprintln(stderr, string(b))
		return code
	}
	fmt.Fprintln(stderr, "sluice:", err)
	if strings.Contains(err.Error(), "INADEQUATE_SECURITY") {
		// A TLS listener's answer to a cleartext HTTP/2 client
		// (internal/tlsfiles).
		fmt.Fprintln(stderr, "sluice: the server serves TLS: use an https:// endpoint (and --ca-file for a private CA)")
	}
	if hasDelay {
		fmt.Fprintf(stderr, "sluice: the server asks to wait %s: retry after %s\n", fmtSpan(delay), time.Now().Add(delay).Format("15:04:05"))
	}
	if len(env) > 0 {
		fmt.Fprintf(stderr, "sluice: flags set from the environment: %s\n", strings.Join(env, ", "))
	}
	return code
}

// jsonError is an error as -o json writes it on stderr:
// {"error":{"code":"not_found","message":"…"}}. Code is the Connect code
// (invalid_argument for a usage error, unknown for a local failure); the
// exit code says the same as without -o json.
type jsonError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryDelay is how long the server asks to wait, as a protojson
	// duration ("5s"), when it says.
	RetryDelay string `json:"retryDelay,omitempty"`
	// FromEnvironment names the flags of a usage error's command that
	// were set from $SLUICE_* variables.
	FromEnvironment []string `json:"fromEnvironment,omitempty"`
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
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

// wantsJSON reports whether args or $SLUICE_OUTPUT ask for -o json, for
// errors that come before the flags are parsed (an unknown command, a bad
// flag), so that they are JSON too.
func wantsJSON(args []string) bool {
	out := os.Getenv(flagenv.Name(envPrefix, "output"))
	for i := 0; i < len(args); i++ {
		switch arg := args[i]; {
		case arg == "--":
			return out == "json"
		case (arg == "-o" || arg == "--output") && i+1 < len(args):
			out = args[i+1]
			i++
		case strings.HasPrefix(arg, "--output="):
			out = strings.TrimPrefix(arg, "--output=")
		case strings.HasPrefix(arg, "-o"):
			out = strings.TrimPrefix(strings.TrimPrefix(arg, "-o"), "=")
		}
	}
	return out == "json"
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
Usage and invoices:   sluice usage --by day; sluice invoice list

` + envHelp + `

Exit codes: 0 ok, 1 error, 2 usage, 3 unauthenticated or permission denied,
4 not found, 5 already exists.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd); err != nil {
				return err
			}
			return a.checkOutput(cmd)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.configPath, "cli-config", defaultConfigPath(), "CLI config file holding profiles (endpoint + API key), mode 0600")
	pf.StringVar(&a.profile, "profile", "default", "profile to use from the config file")
	pf.StringVar(&a.endpoint, "endpoint", "", "control-plane URL, e.g. http://127.0.0.1:8080 (overrides the profile)")
	pf.StringVar(&a.apiKey, "api-key", "", "API key (slk_…) to authenticate with (overrides the profile)")
	pf.StringVar(&a.caFile, "ca-file", "", "PEM CA certificates that the servers' TLS certificates must chain to, for https:// endpoints and brokers with a private CA (overrides the profile's; signup and login save it in the profile); default: the system's roots")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table or json (usage, invoice list and invoice get: csv too)")
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
		a.txnCommand(),
		a.alertsCommand(),
		a.webhookCommand(),
		a.benchCommand(),
		a.usageCommand(),
		a.invoiceCommand(),
		a.operatorCommand(),
		a.certCommand(),
		a.versionCommand(), a.healthcheckCommand(), // version.go
	)
	root.InitDefaultCompletionCmd() // before markEnvFlags: its flags have variables too
	markEnvFlags(root)
	acceptDays(root)
	a.registerCompletions(root)
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

// Flags without an environment variable, so that a variable left in the
// environment never writes a record, names or confirms something, or
// changes what exists, on its own: these flag names on every command, and
// every flag of these commands. envHelp, in the root help, lists them.
// The operator credential (envAlwaysFlags) reads its variable also in
// those commands: it changes nothing by itself.
var (
	noEnvFlags     = []string{"value", "key", "header", "name", "description", "email", "tenant", "force", "topic"}
	noEnvCommands  = []string{"topic alter", "group reset-offsets", "group delete-offsets", "alerts policy set", "operator tenant update", "operator prices set"}
	envAlwaysFlags = []string{"operator-token"}
)

// noEnv reports whether flag of the command at path ("topic alter") has
// no variable.
func noEnv(path, flag string) bool {
	return slices.Contains(noEnvFlags, flag) || (slices.Contains(noEnvCommands, path) && !slices.Contains(envAlwaysFlags, flag))
}

// envHelp is the root help's paragraph on environment variables.
var envHelp = wrap("Every flag can also be set through an environment variable: --endpoint is "+
	"$SLUICE_ENDPOINT, --acks is $SLUICE_ACKS, --partitions is $SLUICE_PARTITIONS, and so on "+
	"(each flag's --help shows its variable); the command line wins. Except, so that a variable "+
	"left in the environment never writes, names, confirms or changes anything on its own: "+
	flagList(noEnvFlags)+", and the flags of "+strings.Join(noEnvCommands[:len(noEnvCommands)-1], ", ")+
	" and "+noEnvCommands[len(noEnvCommands)-1]+" (but their "+flagList(envAlwaysFlags)+").", 76)

func flagList(names []string) string {
	fs := make([]string, len(names))
	for i, n := range names {
		fs[i] = "--" + n
	}
	if len(fs) == 1 {
		return fs[0]
	}
	return strings.Join(fs[:len(fs)-1], ", ") + " and " + fs[len(fs)-1]
}

// wrap breaks s into lines of at most width columns at spaces.
func wrap(s string, width int) string {
	var b strings.Builder
	col := 0
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case col+1+len([]rune(w)) > width:
			b.WriteByte('\n')
			col = 0
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len([]rune(w))
	}
	return b.String()
}

// markEnvFlags excludes the flags without a variable (noEnvFlags,
// noEnvCommands) and shows every other flag's variable in its help.
func markEnvFlags(root *cobra.Command) {
	flagenv.Annotate(root.PersistentFlags(), envPrefix)
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if noEnv(path, f.Name) {
				flagenv.Exclude(c.Flags(), f.Name)
			}
		})
		flagenv.Annotate(c.LocalFlags(), envPrefix)
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	for _, c := range root.Commands() {
		visit(c)
	}
}

// applyEnv sets cmd's flags (its own and the global ones) that the command
// line left unset from their $SLUICE_* variables.
func applyEnv(cmd *cobra.Command) error {
	for _, fs := range []*pflag.FlagSet{cmd.InheritedFlags(), cmd.LocalNonPersistentFlags()} {
		if err := flagenv.Apply(fs, envPrefix); err != nil {
			return usageError{err}
		}
	}
	return nil
}

func (a *app) checkOutput(cmd *cobra.Command) error {
	csv := cmd != nil && cmd.Annotations[csvAnnotation] != ""
	switch {
	case a.output == "table", a.output == "json", a.output == "csv" && csv:
		return nil
	case a.output == "csv":
		return usageError{fmt.Errorf("--output csv: only usage, invoice list and invoice get print CSV; %s prints table or json", cmd.CommandPath())}
	case csv:
		return usageError{fmt.Errorf("--output must be table, json or csv; got %q", a.output)}
	}
	return usageError{fmt.Errorf("--output must be table or json; got %q", a.output)}
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
