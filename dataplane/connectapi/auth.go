package connectapi

import (
	"context"
	"net/http"

	"github.com/sluicemq/sluice/dataplane/access"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/tenants"
)

// Authenticator is the broker's access.Authenticator for Connect's
// authentication interceptor (tenants.NewAuthInterceptor): its domain
// errors (a broker still starting is Unavailable) are mapped to Connect's;
// the tenants package's own errors pass for the interceptor to map.
type Authenticator struct{ *access.Authenticator }

func (a Authenticator) Authenticate(ctx context.Context, procedure string, h http.Header) (tenants.Principal, error) {
	p, err := a.Authenticator.Authenticate(ctx, procedure, h)
	return p, connecterr.ToConnect(err)
}
