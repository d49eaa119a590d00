package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/datadir"
	"github.com/musterhq/muster/sqlstore"
)

// initControllerConfig agrees with the store on the controller uuid, the
// admin token's hash and the CA (the first controller's values win) and
// sets c.ca. With Config.CAKeyFile the CA key lives in that file, never
// in the store (S4).
func (c *Controller) initControllerConfig(ctx context.Context, tokenHash string) (map[string]string, error) {
	certPEM, keyPEM, err := dataDirCA(c.cfg.DataDir, c.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	// An empty ca-key marks a key kept outside the store: a controller
	// started without the key file later cannot put a key of its own
	// beside the certificate.
	offer := map[string]string{cfgControllerUUID: muster.NewUUID(), cfgAdminTokenHash: tokenHash, cfgCACert: string(certPEM), cfgCAKey: ""}
	keyFile := c.cfg.CAKeyFile
	wroteKey := false
	if keyFile == "" {
		offer[cfgCAKey] = string(keyPEM)
	} else {
		have, err := c.store.ControllerConfig(ctx)
		if err != nil {
			return nil, err
		}
		if have[cfgCACert] == "" { // a new store: the new CA's key goes to the file only
			if err := writePrivateExclusive(keyFile, keyPEM); errors.Is(err, fs.ErrExist) {
				return nil, muster.Errorf(muster.EInvalid, "ca key file %s exists but store %s has no ca yet: give a new path or remove the file", keyFile, c.cfg.StoreURL)
			} else if err != nil {
				return nil, fmt.Errorf("write ca key file %s: %w", keyFile, err)
			}
			wroteKey = true
		}
	}
	kv, err := c.store.InitControllerConfig(ctx, offer)
	if err != nil {
		return nil, fmt.Errorf("initialise controller config in store %s: %w", c.cfg.StoreURL, err)
	}
	if wroteKey && kv[cfgCACert] != string(certPEM) {
		os.Remove(keyFile)
		return nil, muster.Errorf(muster.EConflict, "another controller made the ca of store %s meanwhile: start again with its ca key file", c.cfg.StoreURL)
	}
	storedKey := kv[cfgCAKey]
	if keyFile == "" {
		if storedKey == "" {
			return nil, muster.Errorf(muster.EInvalid, "store %s keeps no ca key: start with --ca-key-file FILE, the key file of the controllers of this store", c.cfg.StoreURL)
		}
		if c.ca, err = auth.ParseCA([]byte(kv[cfgCACert]), []byte(storedKey)); err != nil {
			return nil, fmt.Errorf("load the ca of store %s: %w", c.cfg.StoreURL, err)
		}
		return kv, nil
	}
	if storedKey != "" { // the key moves out of the store, into the file
		if err := writePrivateExclusive(keyFile, []byte(storedKey)); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("write ca key file %s: %w", keyFile, err)
		}
	}
	key, err := readKeyFile(keyFile)
	if err != nil {
		return nil, err
	}
	if c.ca, err = auth.ParseCA([]byte(kv[cfgCACert]), key); err != nil {
		return nil, muster.Errorf(muster.EInvalid, "ca key file %s does not hold the key of the ca of store %s: %v", keyFile, c.cfg.StoreURL, err)
	}
	if storedKey != "" {
		if err := c.store.SetControllerConfig(ctx, cfgCAKey, ""); err != nil {
			return nil, fmt.Errorf("remove the ca key from store %s: %w", c.cfg.StoreURL, err)
		}
		c.log.Info("moved the ca key out of the store", "ca-key-file", keyFile)
	}
	return kv, nil
}

// readKeyFile reads a CA key file, made private if it was not (S4).
func readKeyFile(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, muster.Errorf(muster.EInvalid, "ca key file %s does not exist: give the key file of the controller that made the store's ca", path)
	}
	if err != nil {
		return nil, fmt.Errorf("read ca key file %s: %w", path, errors.Unwrap(err))
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("ca key file %s: make it private: %w", path, errors.Unwrap(err))
		}
	}
	return key, nil
}

// writePrivate replaces path with data atomically; the file is 0600
// whatever the umask (S4).
func writePrivate(path string, data []byte) error {
	return writeThenPlace(path, data, os.Rename)
}

// writePrivateExclusive is writePrivate for a file that must not exist
// yet: fs.ErrExist when it does. Two writers racing cannot both win, and
// no reader sees a partial file.
func writePrivateExclusive(path string, data []byte) error {
	return writeThenPlace(path, data, os.Link)
}

func writeThenPlace(path string, data []byte, place func(oldpath, newpath string) error) error {
	// os.CreateTemp makes the file 0600, which no umask widens.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return errors.Unwrap(err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a link, the name the file keeps is path
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = place(tmp, path)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// ResetAdminToken gives the store of a data dir a new admin token and
// writes it to a fresh <data-dir>/client.yaml, returned; the old token is
// refused from then on (S2: whoever can read the data dir can recover the
// token). The data dir's controller must be stopped: the lock is taken.
// Other controllers sharing a PostgreSQL store take the new token when
// they next start. storeURL "" is the data dir's SQLite store.
func ResetAdminToken(ctx context.Context, dataDir, storeURL string) (string, error) {
	if fi, err := os.Stat(dataDir); err != nil || !fi.IsDir() {
		return "", muster.Errorf(muster.EInvalid, "data dir %s is not a directory", dataDir)
	}
	if err := datadir.Ensure(dataDir); err != nil {
		return "", err
	}
	lock, err := datadir.Acquire(dataDir)
	if err != nil {
		return "", fmt.Errorf("%w: stop its controller first", err)
	}
	defer lock.Release()
	if storeURL == "" {
		db := filepath.Join(dataDir, "muster.db")
		if _, err := os.Stat(db); err != nil {
			return "", muster.Errorf(muster.EInvalid, "data dir %s has no store (%s): start `muster controller` first, or give --store", dataDir, db)
		}
		storeURL = "sqlite://" + db
	}
	st, err := sqlstore.Open(ctx, storeURL)
	if err != nil {
		return "", err
	}
	defer st.Close()
	kv, err := st.ControllerConfig(ctx)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", storeURL, err)
	}
	if kv[cfgAdminTokenHash] == "" || kv[cfgCACert] == "" {
		return "", muster.Errorf(muster.EInvalid, "store %s holds no controller yet: start `muster controller` first", storeURL)
	}
	cc := &ClientConfig{CACert: kv[cfgCACert], Model: muster.DefaultModel}
	path := filepath.Join(dataDir, "client.yaml")
	if old, err := readClientConfig(path); err == nil {
		cc.Controllers, cc.Model = old.Controllers, old.Model
	}
	if len(cc.Controllers) == 0 {
		live, err := st.Controllers(ctx)
		if err != nil {
			return "", fmt.Errorf("store %s: %w", storeURL, err)
		}
		for _, l := range live {
			cc.Controllers = append(cc.Controllers, "https://"+l.Address)
		}
	}
	var hash string
	cc.Token, hash = auth.NewToken()
	if err := st.SetControllerConfig(ctx, cfgAdminTokenHash, hash); err != nil {
		return "", fmt.Errorf("store %s: %w", storeURL, err)
	}
	if err := cc.Save(path); err != nil {
		return "", fmt.Errorf("%w (the old token is revoked: run admin-token again)", err)
	}
	return path, nil
}
