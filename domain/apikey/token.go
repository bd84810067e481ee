package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"hash/crc32"
	"io"
	"math/big"
	"strings"
)

// TokenPrefix starts every API key ("Taskmaster key"), so that secret
// scanners and humans recognise one.
const TokenPrefix = "tmk_"

// Token layout: TokenPrefix, then the secret (32 random bytes in base62,
// left-padded to secretLength characters), then a checksum (CRC-32 of
// everything before it, in base62, padded to checksumLength characters).
const (
	secretBytes    = 32
	secretLength   = 43 // 62^43 > 2^256
	checksumLength = 6  // 62^6 > 2^32
	// TokenLength is the length of every token.
	TokenLength = len(TokenPrefix) + secretLength + checksumLength
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// inBase62 tells the alphabet's bytes: CheckToken runs on every request.
var inBase62 = func() (t [256]bool) {
	for i := range len(base62) {
		t[base62[i]] = true
	}
	return t
}()

// ErrMalformedToken: the credential is not a token this service issues (bad
// prefix, length, alphabet or checksum). It is refused without a lookup.
var ErrMalformedToken = errors.New("the bearer token is not a Taskmaster API key")

// NewToken returns a fresh token from crypto/rand.
func NewToken() (string, error) { return newToken(rand.Reader) }

func newToken(r io.Reader) (string, error) {
	var b [secretBytes]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", err
	}
	body := TokenPrefix + encode62(new(big.Int).SetBytes(b[:]), secretLength)
	return body + checksum(body), nil
}

// CheckToken reports ErrMalformedToken unless token has the shape and
// checksum of an issued token. A typo, a truncated paste or a token of
// another system is refused before any lookup.
func CheckToken(token string) error {
	if len(token) != TokenLength || !strings.HasPrefix(token, TokenPrefix) {
		return ErrMalformedToken
	}
	for i := len(TokenPrefix); i < len(token); i++ {
		if !inBase62[token[i]] {
			return ErrMalformedToken
		}
	}
	body := token[:len(token)-checksumLength]
	var sum [checksumLength]byte
	if string(checksumOf(body, &sum)) != token[len(body):] {
		return ErrMalformedToken
	}
	return nil
}

// Hash is what storage keeps of a token: its SHA-256 digest. A fast hash
// is the right one here. Slow password hashes (bcrypt, argon2) exist to
// make guessing low-entropy passwords expensive; a token carries 256 random
// bits, so no guess succeeds however fast the hash, and a slow one would
// only cost every request milliseconds of CPU. The digest reveals nothing
// of the token (preimage resistance) and lets a lookup use a unique index.
func Hash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

func checksum(body string) string {
	var sum [checksumLength]byte
	return string(checksumOf(body, &sum))
}

// checksumOf writes the CRC-32 of body in base62 into sum.
func checksumOf(body string, sum *[checksumLength]byte) []byte {
	n := crc32.ChecksumIEEE([]byte(body))
	for i := checksumLength - 1; i >= 0; i-- {
		sum[i] = base62[n%62]
		n /= 62
	}
	return sum[:]
}

// encode62 writes n in base62, left-padded with '0' to width.
func encode62(n *big.Int, width int) string {
	out := make([]byte, width)
	base := big.NewInt(62)
	mod := new(big.Int)
	for i := width - 1; i >= 0; i-- {
		n.DivMod(n, base, mod)
		out[i] = base62[mod.Int64()]
	}
	return string(out)
}
