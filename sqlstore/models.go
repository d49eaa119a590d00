package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/google/uuid"
	"github.com/musterhq/muster"
)

// CreateModel creates a model. A zero m.Settings means muster's defaults;
// a fresh UUID is made when m.UUID is empty.
func (s *Store) CreateModel(ctx context.Context, m muster.Model) (muster.Model, error) {
	if err := muster.CheckName(m.Name); err != nil {
		return muster.Model{}, muster.Errorf(muster.EInvalid, "bad model name %q: %s", m.Name, muster.ErrorMessage(err))
	}
	if m.Provider != "" {
		if err := muster.CheckName(m.Provider); err != nil {
			return muster.Model{}, muster.Errorf(muster.EInvalid, "bad provider name %q: %s", m.Provider, muster.ErrorMessage(err))
		}
	}
	if m.UUID == "" {
		m.UUID = uuid.NewString()
	} else if u, err := uuid.Parse(m.UUID); err != nil || u.String() != m.UUID {
		return muster.Model{}, muster.Errorf(muster.EInvalid, "bad model UUID %q: want a lower-case UUID", m.UUID)
	}
	if m.Settings == (muster.Settings{}) {
		m.Settings = muster.DefaultSettings()
	} else if err := m.Settings.Validate(); err != nil {
		return muster.Model{}, err
	}
	cfg := m.Config
	if cfg == nil {
		cfg = map[string]string{}
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return muster.Model{}, fmt.Errorf("encode model config: %w", err)
	}
	setJSON, err := json.Marshal(m.Settings.Map())
	if err != nil {
		return muster.Model{}, fmt.Errorf("encode model settings: %w", err)
	}
	m.Config = copyMap(cfg)
	m.Created = s.clock.Now().UTC()
	err = s.write(ctx, func(t *wtx) error {
		var n int
		if err := t.queryRow(ctx, `SELECT COUNT(*) FROM models WHERE name = ? OR uuid = ?`, m.Name, m.UUID).Scan(&n); err != nil {
			return fmt.Errorf("read models: %w", err)
		}
		if n > 0 {
			return muster.Errorf(muster.EConflict, "model %q already exists", m.Name)
		}
		_, err := t.exec(ctx, `INSERT INTO models (uuid, name, provider, config, settings, next_machine, created) VALUES (?, ?, ?, ?, ?, 0, ?)`,
			m.UUID, m.Name, m.Provider, string(cfgJSON), string(setJSON), nanos(m.Created))
		if err != nil {
			if t.s.d.isUniqueViolation(err) {
				return muster.Errorf(muster.EConflict, "model %q already exists", m.Name)
			}
			return fmt.Errorf("insert model %s: %w", m.Name, err)
		}
		t.change(m.UUID, muster.ChangeModel, "")
		return nil
	})
	if err != nil {
		return muster.Model{}, err
	}
	return m, nil
}

const modelCols = `uuid, name, provider, config, settings, created`

func scanModel(sc interface{ Scan(...any) error }) (muster.Model, error) {
	var m muster.Model
	var cfg, set string
	var created int64
	if err := sc.Scan(&m.UUID, &m.Name, &m.Provider, &cfg, &set, &created); err != nil {
		return m, err
	}
	m.Created = fromNanos(created)
	if err := json.Unmarshal([]byte(cfg), &m.Config); err != nil {
		return m, fmt.Errorf("decode config of model %s: %w", m.Name, err)
	}
	var kv map[string]string
	if err := json.Unmarshal([]byte(set), &kv); err != nil {
		return m, fmt.Errorf("decode settings of model %s: %w", m.Name, err)
	}
	m.Settings = muster.DefaultSettings()
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !muster.KnownSetting(k) {
			continue // written by a newer muster; keep the default
		}
		if err := m.Settings.Set(k, kv[k]); err != nil {
			return m, fmt.Errorf("decode settings of model %s: %w", m.Name, err)
		}
	}
	return m, nil
}

// Model returns the model with the given UUID or, failing that, name.
func (s *Store) Model(ctx context.Context, nameOrUUID string) (muster.Model, error) {
	if err := s.checkOpen(); err != nil {
		return muster.Model{}, err
	}
	row := s.queryRow(ctx, (`SELECT ` + modelCols + ` FROM models WHERE uuid = ? OR name = ? ORDER BY CASE WHEN uuid = ? THEN 0 ELSE 1 END LIMIT 1`),
		nameOrUUID, nameOrUUID, nameOrUUID)
	m, err := scanModel(row)
	if errors.Is(err, sql.ErrNoRows) {
		return muster.Model{}, muster.Errorf(muster.ENotFound, "model %q not found", nameOrUUID)
	}
	if err != nil {
		return muster.Model{}, fmt.Errorf("read model %s: %w", nameOrUUID, err)
	}
	return m, nil
}

// Models returns every model, by name.
func (s *Store) Models(ctx context.Context) ([]muster.Model, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+modelCols+` FROM models ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read models: %w", err)
	}
	defer rows.Close()
	var ms []muster.Model
	for rows.Next() {
		m, err := scanModel(rows)
		if err != nil {
			return nil, fmt.Errorf("read models: %w", err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read models: %w", err)
	}
	return ms, nil
}

// UpdateModelSettings replaces a model's settings.
func (s *Store) UpdateModelSettings(ctx context.Context, modelUUID string, set muster.Settings) error {
	if err := set.Validate(); err != nil {
		return err
	}
	setJSON, err := json.Marshal(set.Map())
	if err != nil {
		return fmt.Errorf("encode model settings: %w", err)
	}
	return s.write(ctx, func(t *wtx) error {
		res, err := t.exec(ctx, `UPDATE models SET settings = ? WHERE uuid = ?`, string(setJSON), modelUUID)
		if err != nil {
			return fmt.Errorf("update settings of model %s: %w", modelUUID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return muster.Errorf(muster.ENotFound, "model %q not found", modelUUID)
		}
		t.change(modelUUID, muster.ChangeModel, "")
		return nil
	})
}

// RemoveModel removes a model without machines, with its events and
// released instances.
func (s *Store) RemoveModel(ctx context.Context, modelUUID string) error {
	return s.write(ctx, func(t *wtx) error {
		// Lock the model row: a concurrent AddMachines waits, then finds
		// the model gone.
		if err := modelFound(t.queryRow(ctx, modelExists+s.d.forUpdate, modelUUID), modelUUID); err != nil {
			return err
		}
		var n int
		if err := t.queryRow(ctx, `SELECT COUNT(*) FROM machines WHERE model_uuid = ?`, modelUUID).Scan(&n); err != nil {
			return fmt.Errorf("count machines of model %s: %w", modelUUID, err)
		}
		if n > 0 {
			return muster.Errorf(muster.EConflict, "model %q still has %d machines", modelUUID, n)
		}
		if _, err := t.exec(ctx, `DELETE FROM models WHERE uuid = ?`, modelUUID); err != nil {
			return fmt.Errorf("remove model %s: %w", modelUUID, err)
		}
		t.change(modelUUID, muster.ChangeModel, "")
		return nil
	})
}

// ControllerConfig returns the controller configuration.
func (s *Store) ControllerConfig(ctx context.Context) (map[string]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return readControllerConfig(ctx, s.rdb)
}

func readControllerConfig(ctx context.Context, q querier) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT key, value FROM controller_config`)
	if err != nil {
		return nil, fmt.Errorf("read controller config: %w", err)
	}
	defer rows.Close()
	kv := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("read controller config: %w", err)
		}
		kv[k] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read controller config: %w", err)
	}
	return kv, nil
}

// InitControllerConfig sets the keys not set yet and returns the result.
func (s *Store) InitControllerConfig(ctx context.Context, kv map[string]string) (map[string]string, error) {
	for k := range kv {
		if k == "" {
			return nil, muster.Errorf(muster.EInvalid, "empty controller config key")
		}
	}
	var out map[string]string
	err := s.write(ctx, func(t *wtx) error {
		keys := make([]string, 0, len(kv))
		for k := range kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if _, err := t.exec(ctx, `INSERT INTO controller_config (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING`, k, kv[k]); err != nil {
				return fmt.Errorf("init controller config %s: %w", k, err)
			}
		}
		var err error
		out, err = readControllerConfig(ctx, t.tx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SetControllerConfig sets one key.
func (s *Store) SetControllerConfig(ctx context.Context, key, value string) error {
	if key == "" {
		return muster.Errorf(muster.EInvalid, "empty controller config key")
	}
	return s.write(ctx, func(t *wtx) error {
		if _, err := t.exec(ctx, `INSERT INTO controller_config (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value); err != nil {
			return fmt.Errorf("set controller config %s: %w", key, err)
		}
		return nil
	})
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
