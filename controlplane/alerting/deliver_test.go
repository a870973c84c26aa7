package alerting

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
)

func TestSignAndVerify(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"alert"}`)
	h := http.Header{}
	h.Set(HeaderTimestamp, "1800000000")
	h.Set(HeaderSignature, Sign(secret, now, body))
	require.NoError(t, Verify(secret, h, body, now.Add(time.Minute), 5*time.Minute))
	require.ErrorContains(t, Verify(secret, h, []byte(`{"type":"alerT"}`), now, 5*time.Minute), "signature mismatch")
	require.ErrorContains(t, Verify([]byte("another secret of 32 bytes......"), h, body, now, 5*time.Minute), "signature mismatch")
	require.ErrorContains(t, Verify(secret, h, body, now.Add(10*time.Minute), 5*time.Minute), "more than", "a replay")
	h.Set(HeaderTimestamp, "soon")
	require.Error(t, Verify(secret, h, body, now, 5*time.Minute))
}

// TestDeliver: a due delivery is POSTed signed and marked delivered; a
// failing endpoint is retried later; one that refuses (4xx) is given up.
func TestDeliver(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	tenant := store.NewID()
	h := sha256.Sum256([]byte("key"))
	require.NoError(t, st.CreateTenant(ctx, store.Tenant{ID: tenant, Name: "t-" + tenant, Email: tenant + "@example.com", Plan: "free", Status: store.TenantActive, CreatedAt: time.Now()},
		store.APIKey{ID: "k_" + store.NewID(), TenantID: tenant, Name: "first", Hash: h[:], Scopes: []string{"consume"}, CreatedAt: time.Now()}))

	secret := []byte("0123456789abcdef0123456789abcdef")
	var (
		mu     sync.Mutex
		got    [][]byte
		status = http.StatusOK
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := Verify(secret, r.Header, body, time.Now(), 5*time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, body)
		w.WriteHeader(status)
	}))
	defer recv.Close()
	wh, err := st.CreateWebhook(ctx, store.Webhook{TenantID: tenant, URL: recv.URL + "/hook"}, secret, 10)
	require.NoError(t, err)

	a := New(st, Config{Sender: NewSender(Guard{AllowInsecureLoopback: true}, 0, nil)})
	enqueue := func(payload string) store.Delivery {
		d, created, err := st.EnqueueDelivery(ctx, store.Delivery{TenantID: tenant, WebhookID: wh.ID, AlertState: store.AlertStateTest, Payload: []byte(payload)})
		require.NoError(t, err)
		require.True(t, created)
		return d
	}

	d := enqueue(`{"n":1}`)
	n, err := a.Deliver(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, got, 1)
	require.JSONEq(t, `{"n":1}`, string(got[0]))
	log, err := st.ListDeliveries(ctx, tenant, wh.ID, 10)
	require.NoError(t, err)
	require.Equal(t, d.ID, log[0].ID)
	require.Equal(t, store.DeliveryDelivered, log[0].Status)

	// A 503: retried later, not now.
	status = http.StatusServiceUnavailable
	enqueue(`{"n":2}`)
	n, err = a.Deliver(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	log, err = st.ListDeliveries(ctx, tenant, wh.ID, 10)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, log[0].Status)
	require.EqualValues(t, 1, log[0].Attempts)
	require.Contains(t, log[0].LastError, "503")
	require.True(t, log[0].NextAttemptAt.After(time.Now()), "retried after a backoff")
	n, err = a.Deliver(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "not due yet")

	// A 410: the endpoint refuses it for good.
	status = http.StatusGone
	enqueue(`{"n":3}`)
	_, err = a.Deliver(ctx)
	require.NoError(t, err)
	log, err = st.ListDeliveries(ctx, tenant, wh.ID, 10)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryFailed, log[0].Status)

	// Every body the receiver accepted was signed and well-formed.
	for _, b := range got {
		require.True(t, json.Valid(b))
	}
}
