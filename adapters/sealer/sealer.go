// Package sealer implements ports.Sealer with AES-256-GCM under keys from
// the configuration (TASKMASTER_PUSH_SECRET_KEYS): what push delivery's
// signing secrets and static headers are stored as (docs/operations.md
// "Push delivery").
//
// A sealed value is "v1:<key id>:<base64url(nonce | ciphertext)>", the key
// id being the first 8 hex digits of the key's SHA-256, and the additional
// data the place the value belongs to (a queue and a field), so a value
// copied to another queue's row does not open. Without keys, values are
// stored marked as not sealed ("plain:<base64url>"); those open under any
// configuration, and are sealed once the queue's push settings change
// (docs/operations.md says how to seal them all).
package sealer

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/taskmaster/taskmaster/ports"
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

const (
	sealedPrefix = "v1:"
	plainPrefix  = "plain:"
)

// Sealer seals with its first key and opens with any of them.
type Sealer struct {
	keys []key
}

type key struct {
	id   string
	aead cipher.AEAD
}

var _ ports.Sealer = (*Sealer)(nil)

// ParseKeys reads TASKMASTER_PUSH_SECRET_KEYS: base64 (standard or URL
// alphabet, padded or not) keys of KeySize bytes separated by commas, the
// one to seal with first. An empty list is valid: nothing is sealed.
func ParseKeys(s string) ([][]byte, error) {
	var out [][]byte
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		var k []byte
		var err error
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if k, err = enc.DecodeString(part); err == nil {
				break
			}
		}
		if err != nil || len(k) != KeySize {
			return nil, fmt.Errorf("key %d: must be %d bytes in base64 (openssl rand -base64 32)", i+1, KeySize)
		}
		out = append(out, k)
	}
	return out, nil
}

// New returns a Sealer over keys (none: values are stored marked as not
// sealed).
func New(keys [][]byte) (*Sealer, error) {
	s := &Sealer{}
	for _, k := range keys {
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("sealer: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("sealer: %w", err)
		}
		sum := sha256.Sum256(k)
		s.keys = append(s.keys, key{id: hex.EncodeToString(sum[:4]), aead: aead})
	}
	return s, nil
}

// Sealing reports whether values are sealed (a key is configured).
func (s *Sealer) Sealing() bool { return len(s.keys) > 0 }

// Seal implements ports.Sealer.
func (s *Sealer) Seal(plaintext, aad string) (string, error) {
	if len(s.keys) == 0 {
		return plainPrefix + base64.RawURLEncoding.EncodeToString([]byte(plaintext)), nil
	}
	k := s.keys[0]
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: %w", err)
	}
	sealed := k.aead.Seal(nonce, nonce, []byte(plaintext), []byte(aad))
	return sealedPrefix + k.id + ":" + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// ErrUnknownKey: a value was sealed with a key the configuration does not
// hold.
var ErrUnknownKey = errors.New("sealed with a key TASKMASTER_PUSH_SECRET_KEYS does not hold")

// Open implements ports.Sealer.
func (s *Sealer) Open(sealed, aad string) (string, error) {
	if rest, ok := strings.CutPrefix(sealed, plainPrefix); ok {
		b, err := base64.RawURLEncoding.DecodeString(rest)
		if err != nil {
			return "", fmt.Errorf("open: %w", err)
		}
		return string(b), nil
	}
	rest, ok := strings.CutPrefix(sealed, sealedPrefix)
	id, data, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return "", errors.New("open: not a sealed value")
	}
	for _, k := range s.keys {
		if k.id != id {
			continue
		}
		b, err := base64.RawURLEncoding.DecodeString(data)
		if err != nil || len(b) < k.aead.NonceSize() {
			return "", errors.New("open: malformed sealed value")
		}
		plain, err := k.aead.Open(nil, b[:k.aead.NonceSize()], b[k.aead.NonceSize():], []byte(aad))
		if err != nil {
			return "", fmt.Errorf("open: %w", err)
		}
		return string(plain), nil
	}
	return "", fmt.Errorf("open: key %s: %w", id, ErrUnknownKey)
}
