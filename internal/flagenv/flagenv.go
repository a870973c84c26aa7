// Package flagenv gives every command-line flag an environment variable
// fallback: flag --listen-addr reads $SLUICE_LISTEN_ADDR when not set on the
// command line. Precedence: command line, then environment, then default.
// A flag marked with Exclude has no variable.
package flagenv

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Annotation keys on a flag: noEnv marks a flag without a variable;
// fromEnv names the variable Apply set the flag from.
const (
	noEnv   = "flagenv/no-env"
	fromEnv = "flagenv/from-env"
)

// Name returns the environment variable for a flag: prefix + upper-case
// name with '-' as '_' ("SLUICE" + "listen-addr" → "SLUICE_LISTEN_ADDR").
func Name(prefix, flag string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Exclude marks fs's flag name as one without an environment variable:
// Annotate and Apply skip it. It panics for a flag fs does not have.
func Exclude(fs *pflag.FlagSet, name string) {
	if err := fs.SetAnnotation(name, noEnv, []string{"true"}); err != nil {
		panic(err)
	}
}

// Excluded reports whether f was marked with Exclude.
func Excluded(f *pflag.Flag) bool { return f.Annotations[noEnv] != nil }

// Annotate appends " [$ENV]" to every flag's help text so --help shows the
// variable. Call once after the flags are registered (and excluded).
func Annotate(fs *pflag.FlagSet, prefix string) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || Excluded(f) || strings.Contains(f.Usage, "[$") {
			return
		}
		f.Usage += fmt.Sprintf(" [$%s]", Name(prefix, f.Name))
	})
}

// Apply sets each flag not given on the command line from its environment
// variable, if that is set and not empty. An invalid value is an error naming both.
func Apply(fs *pflag.FlagSet, prefix string) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" || Excluded(f) {
			return
		}
		env := Name(prefix, f.Name)
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return // an empty variable counts as unset
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("$%s (for --%s): %w", env, f.Name, e)
			return
		}
		_ = fs.SetAnnotation(f.Name, fromEnv, []string{env})
	})
	return err
}

// FromEnvironment lists the flags of fs that Apply set from the
// environment, as "--flag ($ENV)": to explain an error about a flag the
// user did not type.
func FromEnvironment(fs *pflag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if env := f.Annotations[fromEnv]; len(env) > 0 {
			out = append(out, fmt.Sprintf("--%s ($%s)", f.Name, env[0]))
		}
	})
	return out
}
