// Package h2c makes the HTTP client Sluice's servers use to reach each
// other: cleartext HTTP/2 (h2c), with dial timeouts and keep-alives.
package h2c

import (
	"net"
	"net/http"
	"time"
)

// Client returns a new client speaking cleartext HTTP/2 only.
func Client() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:   &p,
		DialContext: (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
	}}
}
