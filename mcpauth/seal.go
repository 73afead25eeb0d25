package mcpauth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeyEnv is the environment variable that holds the key tokens are sealed
// with: 32 bytes, in base64 or hex.
const KeyEnv = "MCP_TOKEN_KEY"

// ErrBadKey is wrapped by the error of a key that is not 32 bytes.
var ErrBadKey = errors.New("MCP_TOKEN_KEY must be 32 bytes, in base64 or hex")

// ErrOpen is wrapped by the error of a sealed value that does not open
// with the key: another key, or a value moved from another identity.
var ErrOpen = errors.New("sealed token does not open with this key")

// ParseKey reads a key written in base64 (standard or URL alphabet, with
// or without padding) or hex.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, dec := range []func(string) ([]byte, error){
		hex.DecodeString,
		base64.StdEncoding.DecodeString, base64.RawStdEncoding.DecodeString,
		base64.URLEncoding.DecodeString, base64.RawURLEncoding.DecodeString,
	} {
		if k, err := dec(s); err == nil && len(k) == 32 {
			return k, nil
		}
	}
	return nil, ErrBadKey
}

// KeyFromEnv returns the key of MCP_TOKEN_KEY, or, when it is not set, a
// new random key and generated true: tokens sealed with it open only in
// this process, so that a restart or another replica asks people to
// connect again. The caller says so in its log.
func KeyFromEnv(getenv func(string) string) (key []byte, generated bool, err error) {
	if v := getenv(KeyEnv); v != "" {
		key, err = ParseKey(v)
		return key, false, err
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, false, fmt.Errorf("generate token key: %w", err)
	}
	return key, true, nil
}

// sealer encrypts tokens with AES-256-GCM. The identity a value belongs
// to is its additional data, so that a sealed value copied under another
// person's key does not open.
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, ErrBadKey
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	return &sealer{aead: aead}, nil
}

// sealVersion prefixes every sealed value, for a later change of scheme.
const sealVersion = 1

func (s *sealer) seal(id Identity, plain []byte) ([]byte, error) {
	nonce := make([]byte, s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal token: %w", err)
	}
	out := append([]byte{sealVersion}, nonce...)
	return s.aead.Seal(out, nonce, plain, id.aad()), nil
}

func (s *sealer) open(id Identity, sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != sealVersion {
		return nil, ErrOpen
	}
	plain, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], id.aad())
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}
