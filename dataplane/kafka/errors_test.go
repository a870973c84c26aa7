package kafka

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/tenants"
)

// TestCodesMatchTheDocs: every kind has a Kafka code, and where
// docs/design/errors.md's Kafka column starts with a code, it is the one
// the listener answers (for coordinators where the column says so).
func TestCodesMatchTheDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/design/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for line := range strings.Lines(string(b)) {
		cols := strings.Split(line, "|")
		if len(cols) < 5 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		documented[strings.Trim(strings.TrimSpace(cols[1]), "`")] = strings.TrimSpace(cols[3])
	}
	checked := 0
	for _, k := range derr.Kinds() {
		if _, ok := codes[k]; !ok {
			t.Errorf("kind %v has no Kafka code", k)
		}
		col, ok := documented[k.String()]
		if !ok {
			t.Errorf("docs/design/errors.md has no row for %v", k)
			continue
		}
		first, _, _ := strings.Cut(col, " ")
		want, err := strconv.Atoi(first)
		if err != nil {
			continue // "none ...", "the API's retriable code: ..."
		}
		p := atRequest
		if strings.Contains(col, "for coordinators") {
			p = atCoordinator
		}
		if got := errorCode(derr.New(k, "x"), p); int(got) != want {
			t.Errorf("%v: answered %d, docs/design/errors.md says %d", k, got, want)
		}
		checked++
	}
	if checked < 40 {
		t.Fatalf("only %d kinds' Kafka codes checked: did the table's layout change?", checked)
	}
}

func TestErrorCodeByPlace(t *testing.T) {
	for _, c := range []struct {
		err  error
		p    place
		want int16
	}{
		{derr.New(derr.Unavailable, "x"), atPartition, kerr.LeaderNotAvailable.Code},
		{derr.New(derr.Unavailable, "x"), atCoordinator, kerr.CoordinatorNotAvailable.Code},
		{derr.New(derr.Unavailable, "x"), atRequest, kerr.RequestTimedOut.Code},
		{fmt.Errorf("wrapped: %w", &derr.NotLeaderError{Leader: 2, Epoch: 3}), atPartition, kerr.NotLeaderForPartition.Code},
		{&derr.NotLeaderError{Leader: -1}, atPartition, kerr.LeaderNotAvailable.Code},
		{fmt.Errorf("%w: no", tenants.ErrPermissionDenied), atPartition, kerr.TopicAuthorizationFailed.Code},
		{fmt.Errorf("%w: no", tenants.ErrInvalidToken), atRequest, kerr.SaslAuthenticationFailed.Code},
		{fmt.Errorf("plain"), atRequest, kerr.UnknownServerError.Code},
		{nil, atRequest, 0},
	} {
		if got := errorCode(c.err, c.p); got != c.want {
			t.Errorf("errorCode(%v, %d) = %d, want %d", c.err, c.p, got, c.want)
		}
	}
	if m := errorMessage(fmt.Errorf("secret internals")); *m != "internal error" {
		t.Errorf("an internal error's text is answered: %q", *m)
	}
}
