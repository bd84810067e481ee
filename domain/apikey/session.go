package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
)

// A Session is a dashboard login: a browser that presented an API key once
// holds an opaque session token instead (in an HttpOnly cookie), so the key
// itself never sits in the browser. Storage keeps the token's SHA-256
// digest, the key it acts as, a CSRF token (a second secret, written into
// every form of the session's pages and checked on every action) and an
// absolute expiry. A session works only while its key does: a revoked or
// expired key ends its sessions.
type Session struct {
	// ID names the session (in logs; never a credential).
	ID uuid.UUID
	// KeyID is the API key the session acts as.
	KeyID uuid.UUID
	// CSRF is the session's anti-forgery token.
	CSRF string
	// CreatedAt and ExpiresAt are database times.
	CreatedAt, ExpiresAt time.Time
}

// SessionPrefix starts every session token, so that one pasted where an
// API key is expected is recognisably something else.
const SessionPrefix = "tms_"

var (
	// ErrNoSession: the request carries no session token.
	ErrNoSession = errors.New("not logged in")
	// ErrSessionUnknown: no session has the token (never issued, logged
	// out, or cleaned up after expiry).
	ErrSessionUnknown = errors.New("the session is unknown or was logged out")
	// ErrSessionExpired: the session's lifetime is over.
	ErrSessionExpired = errors.New("the session expired")
)

// NewSessionSecrets returns a fresh session token and CSRF token: 256
// random bits each, base64url.
func NewSessionSecrets() (token, csrf string, err error) {
	var b [64]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	enc := base64.RawURLEncoding
	return SessionPrefix + enc.EncodeToString(b[:32]), enc.EncodeToString(b[32:]), nil
}

// SessionHash is the digest under which a session token is stored.
func SessionHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// WellFormedSession reports whether token looks like a session token (a
// cheap check before any lookup).
func WellFormedSession(token string) bool {
	body, ok := strings.CutPrefix(token, SessionPrefix)
	if !ok || len(body) != 43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(body)
	return err == nil
}

// Check returns ErrSessionExpired once now reaches the expiry.
func (s *Session) Check(now time.Time) error {
	if !now.Before(s.ExpiresAt) {
		return ErrSessionExpired
	}
	return nil
}

// CheckCSRF reports whether token is the session's CSRF token (in constant
// time).
func (s *Session) CheckCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.CSRF)) == 1
}
