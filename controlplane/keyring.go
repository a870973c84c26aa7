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
// shared by every control-plane replica. sync creates the first key,
// rotates when the active key is older than the rotation period (the old
// key is retired, not deleted, so its tokens verify until they expire), and
// deletes keys no token can still need. Replicas that rotate at the same
// moment converge: only the newest active key stays active.
type keyring struct {
	store    store.Store
	issuer   *tenants.Issuer
	rotation time.Duration
	keep     time.Duration // how long a retired key is kept in the store
	logger   *slog.Logger
	now      func() time.Time

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
		if keys[i].RetiredAt.IsZero() && (newest == nil || keys[i].CreatedAt.After(newest.CreatedAt)) {
			newest = &keys[i]
		}
	}
	if newest == nil || !now.Before(newest.CreatedAt.Add(k.rotation)) {
		nk, err := tenants.GenerateSigningKey(now)
		if err != nil {
			return err
		}
		sk := store.SigningKey{KID: nk.KID, Private: nk.Private, CreatedAt: nk.CreatedAt}
		if err := k.store.InsertSigningKey(ctx, sk); err != nil {
			return fmt.Errorf("insert signing key: %w", err)
		}
		k.logger.InfoContext(ctx, "new JWT signing key", "kid", sk.KID)
		keys = append(keys, sk)
		newest = &keys[len(keys)-1]
	}
	var current []tenants.SigningKey
	for _, sk := range keys {
		switch {
		case sk.KID != newest.KID && sk.RetiredAt.IsZero():
			if err := k.store.RetireSigningKey(ctx, sk.KID, now); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("retire signing key: %w", err)
			}
			sk.RetiredAt = now
			k.logger.InfoContext(ctx, "JWT signing key retired", "kid", sk.KID)
		case !sk.RetiredAt.IsZero() && now.After(sk.RetiredAt.Add(k.keep)):
			if err := k.store.DeleteSigningKey(ctx, sk.KID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("delete signing key: %w", err)
			}
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
	k.mu.Lock()
	stale := k.now().Sub(k.lastReload) > time.Second
	k.mu.Unlock()
	if !stale {
		return nil, err
	}
	if serr := k.sync(ctx); serr != nil {
		return nil, err
	}
	return src.PublicKey(ctx, kid)
}
