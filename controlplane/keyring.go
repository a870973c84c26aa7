package controlplane

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants"
)

// keyring keeps the issuer's signing keys in step with the store, which is
// shared by every control-plane replica.
//
// Rotation without a flag day: when the active key is due, sync inserts the
// next key with CreatedAt = now + prepublish and retires the active key at
// that same instant. Every replica and every broker's JWKS cache sees the
// next key before anyone signs with it, and all replicas switch at the same
// moment by the clock, however stale their last sync. A retired key stays
// in the JWKS until its last token expires (RetiredAt + TTL + leeway), then
// is deleted. Replicas that rotate at the same moment converge: only the
// newest unretired key survives the next sync.
type keyring struct {
	store      store.Store
	issuer     *tenants.Issuer
	rotation   time.Duration
	prepublish time.Duration
	keep       time.Duration // how long a retired key is kept in the store
	logger     *slog.Logger
	now        func() time.Time

	mu         sync.Mutex
	lastReload time.Time
}

func (k *keyring) sync(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now().UTC()
	keys, err := k.store.ListSigningKeys(ctx)
	if err != nil {
		return fmt.Errorf("list signing keys: %w", err)
	}
	var newest *store.SigningKey
	for i := range keys {
		if keys[i].RetiredAt.IsZero() && (newest == nil || newer(keys[i], *newest)) {
			newest = &keys[i]
		}
	}
	switch {
	case newest == nil: // first start: sign at once
		if newest, err = k.insert(ctx, now); err != nil {
			return err
		}
		keys = append(keys, *newest)
	case !now.Add(k.prepublish).Before(newest.CreatedAt.Add(k.rotation)):
		next, err := k.insert(ctx, now.Add(k.prepublish))
		if err != nil {
			return err
		}
		keys = append(keys, *next)
		newest = next
	}
	var current []tenants.SigningKey
	for _, sk := range keys {
		switch {
		case sk.KID != newest.KID && sk.RetiredAt.IsZero():
			// Retire when the newest key takes over (or now, if a key lost a
			// concurrent rotation and never signed).
			at := newest.CreatedAt
			if sk.CreatedAt.After(at) {
				at = sk.CreatedAt
			}
			if err := k.store.RetireSigningKey(ctx, sk.KID, at); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("retire signing key: %w", err)
			}
			sk.RetiredAt = at
			k.logger.InfoContext(ctx, "JWT signing key retired", "kid", sk.KID, "at", at)
		case !sk.RetiredAt.IsZero() && now.After(sk.RetiredAt.Add(k.keep)):
			if err := k.store.DeleteSigningKey(ctx, sk.KID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("delete signing key: %w", err)
			}
			k.logger.InfoContext(ctx, "JWT signing key deleted", "kid", sk.KID)
			continue
		}
		current = append(current, tenants.SigningKey{
			KID: sk.KID, Private: ed25519.PrivateKey(sk.Private), CreatedAt: sk.CreatedAt, RetiredAt: sk.RetiredAt,
		})
	}
	k.issuer.SetKeys(current)
	k.lastReload = now
	return nil
}

// newer orders keys by creation time, then kid, so that every replica
// picks the same winner after a concurrent rotation.
func newer(a, b store.SigningKey) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.After(b.CreatedAt)
	}
	return a.KID > b.KID
}

// insert stores a new key that signs from `from` on.
func (k *keyring) insert(ctx context.Context, from time.Time) (*store.SigningKey, error) {
	nk, err := tenants.GenerateSigningKey(from)
	if err != nil {
		return nil, err
	}
	sk := store.SigningKey{KID: nk.KID, Private: nk.Private, CreatedAt: nk.CreatedAt}
	if err := k.store.InsertSigningKey(ctx, sk); err != nil {
		return nil, fmt.Errorf("insert signing key: %w", err)
	}
	k.logger.InfoContext(ctx, "new JWT signing key", "kid", sk.KID, "signs_from", from)
	return &sk, nil
}

// run syncs every interval until ctx is done.
func (k *keyring) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := k.sync(ctx); err != nil && ctx.Err() == nil {
				k.logger.WarnContext(ctx, "signing key sync", "err", err)
			}
		}
	}
}

// PublicKey resolves a kid for this control plane's own verifier. A kid it
// does not know may have been created a moment ago by another replica, so
// it reloads from the store (at most once a second) before giving up.
func (k *keyring) PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	src := k.issuer.KeySource()
	pk, err := src.PublicKey(ctx, kid)
	if !errors.Is(err, tenants.ErrUnknownKey) {
		return pk, err
	}
	// Claim the reload slot under the lock, so a flood of made-up kids
	// costs at most one store read a second.
	k.mu.Lock()
	stale := k.now().Sub(k.lastReload) > time.Second
	if stale {
		k.lastReload = k.now()
	}
	k.mu.Unlock()
	if !stale {
		return nil, err
	}
	if serr := k.sync(ctx); serr != nil {
		k.logger.WarnContext(ctx, "signing key reload", "err", serr)
		return nil, err
	}
	return src.PublicKey(ctx, kid)
}
