package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/musterhq/muster/auth"
)

// listenAgents serves the controller's API on each of hosts (host
// addresses that instances reach the controller through, such as a
// docker zone network's gateway), so that agents there can log in without
// the API being exposed beyond this host. Each listener takes the main
// listener's port when it is free, else any port, and has its own
// certificate naming its address. An address the main listener already
// serves with a certificate for it (127.0.0.1) is used as is. It returns the
// https URLs, in the order of hosts, and a function that closes the
// listeners it opened.
func (c *Controller) listenAgents(_ context.Context, hosts []string) ([]string, func(), error) {
	mainHost, port, _ := net.SplitHostPort(c.listener.Addr().String())
	var (
		urls []string
		ls   []net.Listener
	)
	closeAll := func() {
		for _, l := range ls {
			l.Close()
		}
	}
	for _, h := range hosts {
		ip := net.ParseIP(h)
		if ip == nil {
			closeAll()
			return nil, nil, fmt.Errorf("agent listener: bad address %q", h)
		}
		if ip.Equal(net.ParseIP(mainHost)) {
			urls = append(urls, c.url)
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(h, port))
		if err != nil {
			if l, err = net.Listen("tcp", net.JoinHostPort(h, "0")); err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("agent listener on %s: %w", h, err)
			}
		}
		cert, err := c.ca.ServerCertificate([]string{h}, c.cfg.Clock.Now())
		if err != nil {
			l.Close()
			closeAll()
			return nil, nil, err
		}
		ls = append(ls, l)
		_, p, _ := net.SplitHostPort(l.Addr().String())
		urls = append(urls, "https://"+net.JoinHostPort(h, p))
		tl := tls.NewListener(l, auth.ServerTLSConfig(cert))
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if err := c.server.Serve(tl); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				c.log.Warn("agent listener stopped", "addr", l.Addr().String(), "err", err)
			}
		}()
		c.log.Info("serving agents", "addr", l.Addr().String())
	}
	var once sync.Once
	return urls, func() { once.Do(closeAll) }, nil
}
