package alerting

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestLoggedErrorsLeaveTheURLOut: a failed attempt's error as logged keeps
// what went wrong and drops the webhook's URL, which may carry a secret.
func TestLoggedErrorsLeaveTheURLOut(t *testing.T) {
	err := &url.Error{Op: "Post", URL: "https://hooks.example/t/secret-token?key=k", Err: context.DeadlineExceeded}
	got := withoutURL(err)
	if strings.Contains(got.Error(), "secret-token") || strings.Contains(got.Error(), "key=k") {
		t.Fatalf("logged %q: the URL is in it", got)
	}
	if !errors.Is(got, context.DeadlineExceeded) || !strings.HasPrefix(got.Error(), "Post: ") {
		t.Fatalf("logged %q: want the operation and the cause", got)
	}
	other := errors.New("endpoint answered 500 Internal Server Error")
	if withoutURL(other) != other {
		t.Fatal("an error without a URL is logged as it is")
	}
}
