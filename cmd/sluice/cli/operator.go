package cli

import (
	"errors"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"

	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
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
	hc, err := httpClient(p.Endpoint)
	if err != nil {
		return nil, err
	}
	return sluicev1connect.NewOperatorServiceClient(hc, strings.TrimRight(p.Endpoint, "/"), connect.WithInterceptors(tenants.Bearer(token))), nil
}
