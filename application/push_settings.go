package application

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// PushConfig is what push delivery needs of the server's configuration.
type PushConfig struct {
	// Allow is TASKMASTER_PUSH_ALLOWED_HOSTS (empty: push delivery is off).
	Allow push.AllowList
	// Sealer seals the secrets for storage.
	Sealer ports.Sealer
}

// SecretPrefix starts every push signing secret.
const SecretPrefix = "tmpush_"

// newSecret returns a fresh signing secret: SecretPrefix and 32 random
// bytes in unpadded base64url.
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate push secret: %w", err)
	}
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// secretAAD and headersAAD bind sealed values to their queue and field.
func secretAAD(q string) string  { return "queue:" + q + ":push_secret" }
func headersAAD(q string) string { return "queue:" + q + ":push_headers" }

// checkPushAllowed refuses a push patch whose URL the allow list does not
// allow (or any push patch turning push on while push delivery is off).
func (c PushConfig) checkPushAllowed(p queue.Patch) error {
	pp := p.Push.Value
	if !p.Push.Set || pp == nil {
		return nil
	}
	var v validation.Errors
	if c.Allow.Empty() || c.Sealer == nil {
		v.Add("push", "push delivery is off on this server: TASKMASTER_PUSH_ALLOWED_HOSTS is empty")
		return v.Err()
	}
	if pp.URL != nil {
		if u, err := url.Parse(*pp.URL); err == nil && !c.Allow.Allows(u.Hostname()) {
			v.Add("push.url", fmt.Sprintf("host %q is not allowed by TASKMASTER_PUSH_ALLOWED_HOSTS", u.Hostname()))
		}
	}
	return v.Err()
}

// applyPushSecrets seals what the change of queue q's push delivery from
// cur to next (Patch p already applied) needs: a secret for a queue that
// turns push on, a new one when asked to rotate (the old one kept for the
// overlap), the static headers when the patch sets them; the values it
// keeps are sealed again with the current key. It returns the new secret
// in clear ("" when none), which the answer shows once.
func (c PushConfig) applyPushSecrets(q string, p queue.Patch, cur, next *queue.Push, now time.Time) (string, error) {
	pp := p.Push.Value
	if next == nil || !p.Push.Set || pp == nil {
		return "", nil
	}
	next.ForgetExpiredSecret(now)
	var secret string
	if cur == nil || pp.RotateSecret {
		var err error
		if secret, err = newSecret(); err != nil {
			return "", err
		}
		if cur != nil && next.Sealed.Secret != "" && pp.Overlap() > 0 {
			// The old secret goes on signing: it must open under a key
			// this server holds.
			if next.Sealed.Secret, err = c.reseal(next.Sealed.Secret, secretAAD(q), "push.rotate_secret"); err != nil {
				return "", err
			}
		}
		sealed, err := c.Sealer.Seal(secret, secretAAD(q))
		if err != nil {
			return "", err
		}
		overlap := pp.Overlap()
		if cur == nil {
			overlap = 0
		}
		next.RotateSecret(sealed, overlap, now)
	} else {
		var err error
		if next.Sealed.Secret, err = c.reseal(next.Sealed.Secret, secretAAD(q), "push.rotate_secret"); err != nil {
			return "", err
		}
		if next.Sealed.PreviousSecret != "" {
			if next.Sealed.PreviousSecret, err = c.reseal(next.Sealed.PreviousSecret, secretAAD(q), "push.rotate_secret"); err != nil {
				return "", err
			}
		}
	}
	switch {
	case pp.Headers.Set:
		next.Sealed.Headers = ""
		if h := pp.Headers.Value; h != nil && len(*h) > 0 {
			raw, err := json.Marshal(queue.CanonicalHeaders(*h))
			if err != nil {
				return "", err
			}
			if next.Sealed.Headers, err = c.Sealer.Seal(string(raw), headersAAD(q)); err != nil {
				return "", err
			}
		}
	case next.Sealed.Headers != "":
		var err error
		if next.Sealed.Headers, err = c.reseal(next.Sealed.Headers, headersAAD(q), "push.headers"); err != nil {
			return "", err
		}
	}
	return secret, nil
}

// reseal opens a stored value and seals it again with the current key; a
// value this server cannot open is a validation error on field, the one
// that replaces it.
func (c PushConfig) reseal(sealed, aad, field string) (string, error) {
	plain, err := c.Sealer.Open(sealed, aad)
	if err != nil {
		var v validation.Errors
		v.Add(field, "the stored value cannot be opened with TASKMASTER_PUSH_SECRET_KEYS ("+err.Error()+"): replace it")
		return "", v.Err()
	}
	return c.Sealer.Seal(plain, aad)
}

// OpenPushSecrets opens a push queue's sealed secrets: the signing secrets
// (the current one first, then the previous one while it still signs) and
// the static headers.
func OpenPushSecrets(s ports.Sealer, q ports.PushQueue) (secrets []string, headers map[string]string, err error) {
	sec, err := s.Open(q.Push.Sealed.Secret, secretAAD(q.Queue))
	if err != nil {
		return nil, nil, fmt.Errorf("push secret of queue %s: %w", q.Queue, err)
	}
	secrets = []string{sec}
	if prev := q.Push.Sealed.PreviousSecret; prev != "" {
		p, err := s.Open(prev, secretAAD(q.Queue))
		if err != nil {
			return nil, nil, fmt.Errorf("previous push secret of queue %s: %w", q.Queue, err)
		}
		secrets = append(secrets, p)
	}
	headers = map[string]string{}
	if h := q.Push.Sealed.Headers; h != "" {
		raw, err := s.Open(h, headersAAD(q.Queue))
		if err != nil {
			return nil, nil, fmt.Errorf("push headers of queue %s: %w", q.Queue, err)
		}
		if err := json.Unmarshal([]byte(raw), &headers); err != nil {
			return nil, nil, errors.New("push headers of queue " + q.Queue + ": not a JSON object")
		}
	}
	return secrets, headers, nil
}
