package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// DashboardCode asks for a one-time dashboard sign-in code (POST
// /v1/dashboard/codes; admin only). It is valid for DashboardCodeTTL and
// can be used once.
func (c *Client) DashboardCode(ctx context.Context) (string, error) {
	var out DashboardCode
	if err := c.Do(ctx, http.MethodPost, "/v1/dashboard/codes", nil, &out); err != nil {
		return "", err
	}
	return out.Code, nil
}

// DashboardURL returns a dashboard sign-in URL carrying a fresh one-time
// code: <controller-url>/dashboard/signin?code=…
func (c *Client) DashboardURL(ctx context.Context) (string, error) {
	code, err := c.DashboardCode(ctx)
	if err != nil {
		return "", err
	}
	return c.base.String() + DashboardSigninPath + "?code=" + url.QueryEscape(code), nil
}

// MachinesStatus returns the model's status restricted to the named
// machines (GET .../status?machines=…): those that exist, and zones
// counting only them. At most MaxStatusMachines ids.
func (c *Client) MachinesStatus(ctx context.Context, model string, ids []string) (Status, error) {
	var out Status
	p := modelPath(model, "status") + "?machines=" + url.QueryEscape(strings.Join(ids, ","))
	return out, c.Do(ctx, http.MethodGet, p, nil, &out)
}
