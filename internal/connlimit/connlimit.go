// Package connlimit caps the connections an HTTP server holds open (S5),
// so that idle or slow clients cannot use up the process's file
// descriptors. At the cap a new connection does not wait: the connection
// that has been idle longest (keep-alive, or connected without sending a
// request) is closed to make room, so a client with a request to make —
// the admin's `muster status` — is still served. Only when every held
// connection is busy with a request is the new one closed at once.
package connlimit

import (
	"net"
	"net/http"
	"sync"
	"syscall"
)

// Limiter tracks a server's connections. Wrap the listener with Listener
// and set http.Server.ConnState to the limiter's ConnState. It is safe for
// concurrent use.
type Limiter struct {
	max int

	mu      sync.Mutex
	conns   map[*conn]struct{}
	seq     uint64 // orders idle periods: smaller = idle longer
	evicted uint64
	refused uint64
}

// New returns a limiter that holds at most max connections (at least 1).
func New(n int) *Limiter {
	return &Limiter{max: max(n, 1), conns: map[*conn]struct{}{}}
}

// FromRlimit returns the connection cap for this process: the soft limit
// of open files less reserve (for the store, logs, provider clients),
// and at least 64.
func FromRlimit(reserve int) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<20 {
		return 1 << 16
	}
	return max(int(rl.Cur)-reserve, 64)
}

// Stats says how many connections are open and how many were closed to
// make room (evicted) or because every held one was busy (refused).
type Stats struct {
	Open, Max        int
	Evicted, Refused uint64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Open: len(l.conns), Max: l.max, Evicted: l.evicted, Refused: l.refused}
}

// Listener wraps inner so that every accepted connection is tracked.
func (l *Limiter) Listener(inner net.Listener) net.Listener {
	return &listener{Listener: inner, l: l}
}

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := &conn{Conn: c, l: ln.l}
		if ln.l.admit(tc) {
			return tc, nil
		}
		c.Close()
	}
}

// conn is a tracked connection.
type conn struct {
	net.Conn
	l    *Limiter
	busy bool   // a request is being served (guarded by l.mu)
	idle uint64 // when it went idle, in l.seq (guarded by l.mu)
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// admit adds c, making room by closing the longest-idle connection when
// the limiter is full; false when every held connection is busy.
func (l *Limiter) admit(c *conn) bool {
	l.mu.Lock()
	var victim *conn
	if len(l.conns) >= l.max {
		for o := range l.conns {
			if !o.busy && (victim == nil || o.idle < victim.idle) {
				victim = o
			}
		}
		if victim == nil {
			l.refused++
			l.mu.Unlock()
			return false
		}
		delete(l.conns, victim)
		l.evicted++
	}
	l.seq++
	c.idle = l.seq
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return true
}

// ConnState is the http.Server.ConnState hook: it tells the limiter which
// connections are serving a request and which are idle.
func (l *Limiter) ConnState(nc net.Conn, state http.ConnState) {
	c := unwrap(nc)
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch state {
	case http.StateActive:
		c.busy = true
	case http.StateIdle:
		c.busy = false
		l.seq++
		c.idle = l.seq
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, c)
	}
}

// unwrap finds the tracked connection under a TLS connection.
func unwrap(nc net.Conn) *conn {
	for nc != nil {
		if c, ok := nc.(*conn); ok {
			return c
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = u.NetConn()
	}
	return nil
}
