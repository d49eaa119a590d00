package controller

import (
	"context"
	"log/slog"
	"time"

	"github.com/musterhq/muster"
)

// TrimEvery is how often the controller running a model's provisioner
// trims the model's events and change log (S10); it also trims once when
// the provisioner starts.
const TrimEvery = time.Hour

// trimLoop trims a model's events and change-log entries older than its
// event-retention now and every TrimEvery on clock, until ctx ends. The
// retention is read from the store each time, so a changed setting
// applies from the next trim.
func trimLoop(ctx context.Context, st muster.Store, clock muster.Clock, modelUUID string, log *slog.Logger) {
	for {
		trimOnce(ctx, st, modelUUID, log)
		if muster.Sleep(ctx, clock, TrimEvery) != nil {
			return
		}
	}
}

func trimOnce(ctx context.Context, st muster.Store, modelUUID string, log *slog.Logger) {
	m, err := st.Model(ctx, modelUUID)
	if err != nil {
		if ctx.Err() == nil && muster.ErrorCode(err) != muster.ENotFound {
			log.Warn("trim events: read model", "err", err)
		}
		return
	}
	retention := m.Settings.EventRetention
	if retention <= 0 {
		retention = muster.DefaultSettings().EventRetention
	}
	t, err := st.Trim(ctx, modelUUID, retention)
	switch {
	case err != nil:
		if ctx.Err() == nil && muster.ErrorCode(err) != muster.ENotFound {
			log.Warn("trim events", "err", err)
		}
	case t.Events > 0 || t.Changes > 0:
		log.Info("trimmed events and changes", "retention", retention, "events", t.Events, "changes", t.Changes, "floor", t.Floor)
	default:
		log.Debug("nothing to trim", "retention", retention)
	}
}
