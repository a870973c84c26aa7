package endpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	require.Equal(t, "http://b1:9092", URL("b1:9092", "http"))
	require.Equal(t, "https://b1:9092", URL("b1:9092", "https"))
	require.Equal(t, "https://b1:9092", URL("https://b1:9092", "http"))
	require.Equal(t, "https", Scheme("https://b1:9092"))
	require.Equal(t, "", Scheme("b1:9092"))
}

func TestValidate(t *testing.T) {
	for _, ok := range []string{"b1:9092", "127.0.0.1:1", "[::1]:65535", "https://b1:9092", "http://b1:9092"} {
		require.NoError(t, Validate(ok), ok)
	}
	for _, bad := range []string{"", "b1", ":9092", "b1:0", "b1:65536", "b1:x", "ftp://b1:9092", "https://b1", "https://b1:9092/x", "https://b1:9092/",
		"https://u@b1:9092", "https://b1:9092?x=1", "https://b1:9092#f", "https://"} {
		require.Error(t, Validate(bad), bad)
	}
}
