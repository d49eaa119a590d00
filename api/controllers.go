package api

import (
	"context"
	"net/http"
	"time"

	"github.com/musterhq/muster"
)

// ControllerInfo is a live controller sharing the store (GET
// /v1/controllers): clients may use any of them.
type ControllerInfo struct {
	ID      string    `json:"id"`      // the controller's own id (not the shared controller uuid)
	URL     string    `json:"url"`     // https://host:port of its API
	Expires time.Time `json:"expires"` // live until then unless it registers again
}

// handleControllers lists the live controllers registered in the store;
// an empty list when the store keeps no registry.
func (s *Server) handleControllers(w http.ResponseWriter, r *http.Request) error {
	out := []ControllerInfo{}
	if reg, ok := s.store.(muster.ControllerRegistry); ok {
		cs, err := reg.Controllers(r.Context())
		if err != nil {
			return err
		}
		for _, c := range cs {
			out = append(out, ControllerInfo{ID: c.ID, URL: "https://" + c.Address, Expires: c.Expires})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// Controllers returns the live controllers sharing the store (GET
// /v1/controllers).
func (c *Client) Controllers(ctx context.Context) ([]ControllerInfo, error) {
	var out []ControllerInfo
	return out, c.Do(ctx, http.MethodGet, "/v1/controllers", nil, &out)
}

// Version returns the controller's build (GET /v1/version).
func (c *Client) Version(ctx context.Context) (muster.Build, error) {
	var out muster.Build
	return out, c.Do(ctx, http.MethodGet, "/v1/version", nil, &out)
}
