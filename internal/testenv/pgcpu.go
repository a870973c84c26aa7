package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresBackendsCPU is the CPU time (user and system) the Postgres
// backends serving conn's database have used, conn's own excepted, read
// from /proc: the server runs on this machine. Backends gone since the
// query count nothing; without /proc it is 0. Benchmarks use it to count
// the database's work with their own.
func PostgresBackendsCPU(tb testing.TB, conn *pgx.Conn) time.Duration {
	tb.Helper()
	rows, err := conn.Query(tb.Context(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		tb.Fatalf("list the Postgres backends: %v", err)
	}
	var total time.Duration
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			tb.Fatalf("list the Postgres backends: %v", err)
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // gone since
		}
		// Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * (time.Second / 100) // clock ticks: USER_HZ is 100 on Linux
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("list the Postgres backends: %v", err)
	}
	return total
}
