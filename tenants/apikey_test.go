package tenants

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAPIKeyRoundTrip(t *testing.T) {
	t.Parallel()
	k, err := GenerateAPIKey()
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^slk_[0-9a-f]{16}_[A-Za-z0-9_-]{49}$`), k.Secret)
	require.Len(t, k.Secret, APIKeyLen)
	require.Equal(t, HashAPIKey(k.Secret), k.Hash)
	require.Len(t, k.Hash, 32)

	id, err := ParseAPIKey(k.Secret)
	require.NoError(t, err)
	require.Equal(t, k.ID, id)
	require.True(t, CheckAPIKey(k.Secret, k.Hash))

	k2, err := GenerateAPIKey()
	require.NoError(t, err)
	require.NotEqual(t, k.ID, k2.ID)
	require.NotEqual(t, k.Secret, k2.Secret)
	require.False(t, CheckAPIKey(k2.Secret, k.Hash), "another key's secret")
	require.False(t, CheckAPIKey(k.Secret, k2.Hash), "another key's hash")
	require.False(t, CheckAPIKey(k.Secret, nil), "no hash")
	require.False(t, CheckAPIKey(k.Secret, k.Hash[:16]), "short hash")
}

func TestAPIKeyWrongSecretWithValidChecksum(t *testing.T) {
	t.Parallel()
	k, err := GenerateAPIKey()
	require.NoError(t, err)
	// Same id, different secret, correct checksum: passes ParseAPIKey, fails CheckAPIKey.
	body := k.Secret[:apiKeySumStart]
	flipped := []byte(body)
	flipped[apiKeySecretStart] = otherB64(flipped[apiKeySecretStart])
	forged := string(flipped) + apiKeyChecksum(string(flipped))
	id, err := ParseAPIKey(forged)
	require.NoError(t, err)
	require.Equal(t, k.ID, id)
	require.False(t, CheckAPIKey(forged, k.Hash))
}

func TestAPIKeyMalformed(t *testing.T) {
	t.Parallel()
	k, err := GenerateAPIKey()
	require.NoError(t, err)
	replaceAt := func(i int) string {
		b := []byte(k.Secret)
		b[i] = otherB64(b[i])
		return string(b)
	}
	tests := []struct {
		name  string
		token string
		want  string
	}{
		{name: "empty", token: "", want: "not an api key"},
		{name: "jwt", token: "eyJhbGciOiJFZERTQSJ9.e30.sig", want: "not an api key"},
		{name: "wrong prefix", token: "xyz_" + k.Secret[4:], want: "not an api key"},
		{name: "truncated", token: k.Secret[:len(k.Secret)-1], want: "not an api key"},
		{name: "extra char", token: k.Secret + "A", want: "not an api key"},
		{name: "typo in secret", token: replaceAt(apiKeySecretStart + 10), want: "checksum"},
		{name: "typo in last secret char", token: replaceAt(apiKeySumStart - 1), want: "checksum"},
		{name: "typo in checksum", token: replaceAt(APIKeyLen - 1), want: "checksum"},
		{name: "typo in id", token: replaceAt(apiKeyIDStart), want: ""},
		{name: "uppercase id", token: strings.Replace(k.Secret, k.ID, strings.ToUpper("abcdefabcdefabcd"), 1), want: "bad key id"},
		{name: "missing separator", token: k.Secret[:apiKeySecretStart-1] + "-" + k.Secret[apiKeySecretStart:], want: "bad key id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseAPIKey(tt.token)
			require.ErrorIs(t, err, ErrMalformedAPIKey)
			require.ErrorContains(t, err, tt.want)
			require.False(t, CheckAPIKey(tt.token, k.Hash))
		})
	}
}

// otherB64 returns a different character that is valid both in lowercase hex and in base64url.
func otherB64(c byte) byte {
	if c == 'a' {
		return 'b'
	}
	return 'a'
}
