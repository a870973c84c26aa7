package tenants

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
)

// APIKeyPrefix starts every API key, so keys are recognisable in logs, in secret scanners and
// next to JWTs in an Authorization header.
const APIKeyPrefix = "slk_"

// API key layout: "slk_" + key id (16 lowercase hex) + "_" + secret (32 random bytes, base64url
// without padding: 43 chars) + checksum (CRC-32/IEEE of everything before it, 4 bytes big-endian,
// base64url without padding: 6 chars). The secret's alphabet contains '_' and '-', so the token is
// parsed by position, never by splitting on '_'.
const (
	apiKeyIDLen       = 16
	apiKeySecretBytes = 32
	apiKeySecretLen   = 43 // base64.RawURLEncoding.EncodedLen(apiKeySecretBytes)
	apiKeyChecksumLen = 6  // base64.RawURLEncoding.EncodedLen(4)
	apiKeyIDStart     = len(APIKeyPrefix)
	apiKeySecretStart = apiKeyIDStart + apiKeyIDLen + 1
	apiKeySumStart    = apiKeySecretStart + apiKeySecretLen
	// APIKeyLen is the length of every well-formed API key.
	APIKeyLen = apiKeySumStart + apiKeyChecksumLen
)

// ErrMalformedAPIKey is wrapped by ParseAPIKey errors: the string is not an API key of ours or
// has a typo (wrong checksum). It is decided without a store lookup.
var ErrMalformedAPIKey = errors.New("malformed api key")

// NewKey is a freshly generated API key.
type NewKey struct {
	// ID is the public key id: 16 lowercase hex chars, the primary key in the store.
	ID string
	// Secret is the full token ("slk_…"), shown to the user once and never stored.
	Secret string
	// Hash is HashAPIKey(Secret), the only form the store keeps.
	Hash []byte
}

// GenerateAPIKey returns a new key with a random id and a 256-bit random secret.
func GenerateAPIKey() (NewKey, error) {
	var raw [apiKeyIDLen/2 + apiKeySecretBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return NewKey{}, fmt.Errorf("read random: %w", err)
	}
	id := hex.EncodeToString(raw[:apiKeyIDLen/2])
	body := APIKeyPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(raw[apiKeyIDLen/2:])
	token := body + apiKeyChecksum(body)
	return NewKey{ID: id, Secret: token, Hash: HashAPIKey(token)}, nil
}

// ParseAPIKey checks token's format and checksum and returns its key id. It does not check the
// secret: look the id up in the store and call CheckAPIKey with the stored hash.
func ParseAPIKey(token string) (id string, err error) {
	if len(token) != APIKeyLen || token[:apiKeyIDStart] != APIKeyPrefix {
		return "", fmt.Errorf("%w: not an api key (want %s… of %d characters)", ErrMalformedAPIKey, APIKeyPrefix, APIKeyLen)
	}
	id = token[apiKeyIDStart : apiKeyIDStart+apiKeyIDLen]
	if !isLowerHex(id) || token[apiKeySecretStart-1] != '_' {
		return "", fmt.Errorf("%w: bad key id", ErrMalformedAPIKey)
	}
	if subtle.ConstantTimeCompare([]byte(apiKeyChecksum(token[:apiKeySumStart])), []byte(token[apiKeySumStart:])) != 1 {
		return "", fmt.Errorf("%w: checksum mismatch (check for a typo)", ErrMalformedAPIKey)
	}
	// The checksum can be right for a secret outside the base64url alphabet only if the key was
	// forged by hand; reject it anyway so every accepted key has 256 bits of entropy.
	if n, err := base64.RawURLEncoding.Strict().DecodeString(token[apiKeySecretStart:apiKeySumStart]); err != nil || len(n) != apiKeySecretBytes {
		return "", fmt.Errorf("%w: bad secret", ErrMalformedAPIKey)
	}
	return id, nil
}

// HashAPIKey returns the SHA-256 of the full token, the value stored for a key.
//
// Not bcrypt/argon2: those slow hashes exist to make guessing low-entropy passwords expensive.
// Our secrets are 256 random bits, so brute force is already infeasible and a slow hash would
// only add tens of milliseconds (and a DoS lever) to every authenticated request. A fast hash
// still means a leaked table of hashes cannot be replayed as credentials.
func HashAPIKey(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// CheckAPIKey reports whether token is well formed and hashes to hash, comparing in constant time.
func CheckAPIKey(token string, hash []byte) bool {
	if _, err := ParseAPIKey(token); err != nil || len(hash) != sha256.Size {
		return false
	}
	return subtle.ConstantTimeCompare(HashAPIKey(token), hash) == 1
}

func apiKeyChecksum(body string) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc32.ChecksumIEEE([]byte(body)))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
