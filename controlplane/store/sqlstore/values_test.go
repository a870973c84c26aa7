package sqlstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSQLStoreScanLists(t *testing.T) {
	t.Parallel()
	var ints []int32
	for _, src := range []any{"{}", "[]", []byte("{}")} {
		ints = []int32{9}
		require.NoError(t, ScanInt32s(&ints).Scan(src))
		require.Nil(t, ints, "%v", src)
	}
	require.NoError(t, ScanInt32s(&ints).Scan("{1,-2,3}"))
	require.Equal(t, []int32{1, -2, 3}, ints)
	require.NoError(t, ScanInt32s(&ints).Scan("[4,5]"))
	require.Equal(t, []int32{4, 5}, ints)
	require.Error(t, ScanInt32s(&ints).Scan("{1,NULL}"))
	require.Error(t, ScanInt32s(&ints).Scan("1,2"))

	var strs []string
	require.NoError(t, ScanStrings(&strs).Scan(`{produce,"a b","q\"x\\y",","}`))
	require.Equal(t, []string{"produce", "a b", `q"x\y`, ","}, strs)
	require.NoError(t, ScanStrings(&strs).Scan(`["a","b"]`))
	require.Equal(t, []string{"a", "b"}, strs)
	require.Error(t, ScanStrings(&strs).Scan(`{"a`))
}
