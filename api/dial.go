package api

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
)

// probeTimeout bounds Dial's check of one controller URL when it has
// several.
const probeTimeout = 5 * time.Second

// dialTimeout bounds the TCP connect and TLS handshake to one controller:
// a controller host that is down (no refusal, no answer) sends the CLI to
// the next controller quickly.
const dialTimeout = 2 * time.Second

// Dial returns a client, for a command-line tool, of the first of the
// controller URLs that answers: its HTTP client trusts caCert and gives up
// quickly on a controller that does not answer the connection. With one
// URL no probe is made: the first real request reports what is wrong.
func Dial(ctx context.Context, urls []string, caCert []byte, token string) (*Client, error) {
	var lastErr error
	hc, err := cliHTTPClient(caCert)
	if err != nil {
		return nil, err
	}
	for _, u := range urls {
		c, err := NewClient(ClientConfig{URL: u, CACert: caCert, Token: token, HTTPClient: hc})
		if err != nil {
			lastErr = err
			continue
		}
		if len(urls) == 1 {
			return c, nil
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		_, err = c.Models(pctx)
		cancel()
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		lastErr = err
		// Only an unreachable controller sends us to the next one; any
		// other answer (say, unauthorized) comes from a live controller.
		if muster.ErrorCode(err) != muster.EUnavailable {
			return c, nil
		}
	}
	return nil, lastErr
}

// cliHTTPClient is the HTTP client of Dial: it trusts the controller's CA
// and gives up quickly on a controller that does not answer the
// connection.
func cliHTTPClient(caCert []byte) (*http.Client, error) {
	tlsCfg, err := auth.ClientTLSConfig(caCert)
	if err != nil {
		return nil, &muster.Error{Code: muster.EInvalid, Message: err.Error(), Err: err}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = dialTimeout
	tr.TLSClientConfig = tlsCfg
	return &http.Client{Transport: tr}, nil
}
