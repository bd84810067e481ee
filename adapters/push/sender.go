// Package push sends push deliveries over HTTP (ports.Sender): the egress
// of push queues, guarded by TASKMASTER_PUSH_ALLOWED_HOSTS (domain/push
// AllowList) at the moment of connecting, after DNS resolution, so a name
// that resolves (or rebinds) to a private address is refused. It follows
// no redirect, uses no proxy, reads at most a bounded answer and gives up
// at the delivery's timeout.
package push

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/ports"
)

// Defaults of a Sender.
const (
	// DefaultMaxResponseBytes is how much of an answer's body is read (a
	// completed task's result, a failure's excerpt): 64 KiB.
	DefaultMaxResponseBytes = 64 << 10
	// UserAgent is sent with every delivery.
	UserAgent = "Taskmaster-Push/1"
	// dialTimeout bounds connecting (within the delivery's timeout).
	dialTimeout = 10 * time.Second
)

// ResolveFunc returns the addresses of host.
type ResolveFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Allow is TASKMASTER_PUSH_ALLOWED_HOSTS.
	Allow push.AllowList
	// MaxResponseBytes is how much of an answer's body is read (0:
	// DefaultMaxResponseBytes).
	MaxResponseBytes int64
	// Resolve resolves host names (nil: the system's resolver). Tests give
	// names of their own.
	Resolve ResolveFunc
}

// Sender implements ports.Sender.
type Sender struct {
	cfg    SenderConfig
	client *http.Client
}

var _ ports.Sender = (*Sender)(nil)

// NewSender returns a Sender with its own connection pool.
func NewSender(cfg SenderConfig) *Sender {
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	s := &Sender{cfg: cfg}
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would be the dial's address: never one
		DialContext:           s.dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   dialTimeout,
		ExpectContinueTimeout: time.Second,
	}
	s.client = &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is the answer
		},
	}
	return s
}

// RefusedError is a connection the allow list refused.
type RefusedError struct {
	Host string
	Addr netip.Addr
}

// Error implements error.
func (e *RefusedError) Error() string {
	if !e.Addr.IsValid() {
		return fmt.Sprintf("host %s is not allowed by TASKMASTER_PUSH_ALLOWED_HOSTS", e.Host)
	}
	return fmt.Sprintf("refused to connect to %s (%s): not a public address, and neither is listed in TASKMASTER_PUSH_ALLOWED_HOSTS",
		e.Addr, e.Host)
}

// dial resolves addr's host, refuses what the allow list does not allow,
// and connects to the first address that answers. The dialer's Control
// checks again the address it is about to connect to.
func (s *Sender) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !s.cfg.Allow.Allows(host) {
		return nil, &RefusedError{Host: host}
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else if addrs, err = s.cfg.Resolve(ctx, host); err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if !s.cfg.Allow.AllowsAddress(host, ap.Addr()) {
				return &RefusedError{Host: host, Addr: ap.Addr()}
			}
			return nil
		}}
	var lastErr error = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	for _, ip := range addrs {
		if !s.cfg.Allow.AllowsAddress(host, ip) {
			lastErr = &RefusedError{Host: host, Addr: ip.Unmap()}
			continue
		}
		conn, err := dialer.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return conn, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// Send implements ports.Sender.
func (s *Sender) Send(ctx context.Context, d ports.Delivery) ports.DeliveryResponse {
	start := time.Now()
	out := s.send(ctx, d)
	out.Latency = time.Since(start)
	return out
}

func (s *Sender) send(ctx context.Context, d ports.Delivery) ports.DeliveryResponse {
	tctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	timedOut := func(err error) bool { return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil }
	req, err := http.NewRequestWithContext(tctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return ports.DeliveryResponse{Err: err}
	}
	for k, v := range d.Header {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	resp, err := s.client.Do(req)
	if err != nil {
		return ports.DeliveryResponse{Err: withoutURL(err), TimedOut: timedOut(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseBytes+1))
	if err != nil {
		// The status came: the answer counts, cut where the body broke
		// off (a timeout while reading it is still a timeout).
		if timedOut(err) {
			return ports.DeliveryResponse{Err: err, TimedOut: true}
		}
	}
	out := ports.DeliveryResponse{Status: resp.StatusCode, Body: body,
		RetryAfter: resp.Header.Get("Retry-After"), Location: resp.Header.Get("Location")}
	if int64(len(body)) > s.cfg.MaxResponseBytes {
		out.Body, out.Truncated = body[:s.cfg.MaxResponseBytes], true
	}
	return out
}

// withoutURL drops the URL net/http puts in a request's error (its query
// may hold a token): what went wrong remains.
func withoutURL(err error) error {
	var u *url.Error
	if errors.As(err, &u) {
		return u.Err
	}
	return err
}
