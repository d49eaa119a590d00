package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/testutil"
)

// TestAdminTokenFollowsTheStore: a token replaced in the store (by
// `muster controller admin-token`, perhaps on another controller of a
// shared store) is refused by a running server, and the new one accepted,
// without a restart (S2).
func TestAdminTokenFollowsTheStore(t *testing.T) {
	h := newHarness(t)
	h.srv.Start()
	ctx := context.Background()
	if _, err := h.admin.Models(ctx); err != nil {
		t.Fatalf("old token before the change: %v", err)
	}
	tok, hash := auth.NewToken()
	if err := h.store.SetControllerConfig(ctx, api.AdminTokenHashKey, hash); err != nil {
		t.Fatal(err)
	}
	fresh := h.client(t, tok)
	testutil.Eventually(t, "the new admin token accepted", func() bool {
		h.clock.Advance(time.Second)
		_, err := fresh.Models(ctx)
		return err == nil
	})
	_, err := h.admin.Models(ctx)
	wantCode(t, err, muster.EUnauthorized)
}
