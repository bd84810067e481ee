package http

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// TLSConfig names the PEM files of the server's certificate (chain) and
// private key. Both empty: plain HTTP (for instance behind a proxy that
// terminates TLS).
type TLSConfig struct {
	CertFile string
	KeyFile  string
}

// Enabled reports whether the server serves HTTPS.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// Validate reports whether the config can be used.
func (c TLSConfig) Validate() error {
	if c.Enabled() && (c.CertFile == "" || c.KeyFile == "") {
		return errors.New("TLS needs both a certificate file and a key file")
	}
	return nil
}

// certificate is the server's certificate, swapped atomically on reload:
// handshakes in progress keep the one they started with, later ones get
// the new one, and no connection is dropped.
type certificate struct {
	cfg     TLSConfig
	current atomic.Pointer[tls.Certificate]
}

// load reads the files and serves their certificate from the next
// handshake on, unless it cannot serve: files that do not hold a pair
// (a key that is not the certificate's own), or a certificate outside its
// validity period (expired, or not valid yet) by this host's clock, with
// which every handshake would fail. On failure the certificate in use
// stays.
func (c *certificate) load() error {
	cert, err := tls.LoadX509KeyPair(c.cfg.CertFile, c.cfg.KeyFile)
	if err == nil {
		err = checkValidity(cert, time.Now())
	}
	if err != nil {
		return fmt.Errorf("load TLS certificate %s and key %s: %w", c.cfg.CertFile, c.cfg.KeyFile, err)
	}
	c.current.Store(&cert)
	return nil
}

// checkValidity refuses a certificate (its leaf, the first of the chain)
// that is not valid at now.
func checkValidity(cert tls.Certificate, now time.Time) error {
	leaf := cert.Leaf
	if leaf == nil {
		if len(cert.Certificate) == 0 {
			return errors.New("no certificate in the file")
		}
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("parse the certificate: %w", err)
		}
	}
	switch {
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("the certificate (serial %s) is not valid before %s", leaf.SerialNumber, leaf.NotBefore.UTC().Format(time.RFC3339))
	case now.After(leaf.NotAfter):
		return fmt.Errorf("the certificate (serial %s) expired at %s", leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func (c *certificate) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.current.Load(), nil
		},
	}
}

// ReloadTLS reads the certificate and key files again and serves the new
// certificate on every later handshake. It fails, keeping the certificate
// in use, when the files do not hold a valid pair (a key that is not the
// certificate's own included), when the certificate is expired or not
// valid yet, or when the server does not serve TLS.
func (s *Server) ReloadTLS() error {
	if s.cert == nil {
		return errors.New("the server does not serve TLS (TASKMASTER_TLS_CERT_FILE is not set)")
	}
	return s.cert.load()
}
