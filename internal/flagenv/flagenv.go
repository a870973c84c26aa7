// Package flagenv gives every command-line flag an environment variable
// fallback: flag --listen-addr reads $SLUICE_LISTEN_ADDR when not set on the
// command line. Precedence: command line, then environment, then default.
package flagenv

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Name returns the environment variable for a flag: prefix + upper-case
// name with '-' as '_' ("SLUICE" + "listen-addr" → "SLUICE_LISTEN_ADDR").
func Name(prefix, flag string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Annotate appends " [$ENV]" to every flag's help text so --help shows the
// variable. Call once after the flags are registered.
func Annotate(fs *pflag.FlagSet, prefix string) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || strings.Contains(f.Usage, "[$") {
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
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		env := Name(prefix, f.Name)
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return // an empty variable counts as unset
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("$%s (for --%s): %w", env, f.Name, e)
		}
	})
	return err
}
