package lxd

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

//go:embed build-image.sh
var buildScript []byte

// ImageOptions says which image BuildImage makes and where.
type ImageOptions struct {
	// Socket is the daemon's unix socket; default DefaultSocket.
	Socket string
	// CacheDir keeps the image tarball between runs (e.g. the controller's
	// data dir + "/lxd"); required.
	CacheDir string
	// Alias is the image alias; default DefaultImage.
	Alias string
	// Suite is the Debian suite; default "bookworm".
	Suite string
	// Mirror is the Debian mirror debootstrap uses; default Debian's.
	Mirror string
	// Rebuild builds and imports the image even when the alias or the
	// cached tarball exists.
	Rebuild bool
	// Log receives debootstrap's progress; default discarded.
	Log io.Writer
}

// Image is what BuildImage did.
type Image struct {
	Alias       string
	Fingerprint string
	Tarball     string // the cached tarball
	Built       bool   // debootstrap ran
	Imported    bool   // the tarball was uploaded to the daemon
}

var suiteRE = regexp.MustCompile(`^[a-z]+$`)

// BuildImage makes sure the daemon has the image under opts.Alias: an
// existing alias is kept (unless Rebuild); otherwise the unified image
// tarball cached in CacheDir is imported, and built first when missing by
// the embedded build-image.sh (debootstrap of Debian with cloud-init, as
// root; minutes). Its fingerprint is the tarball's SHA-256, so an image
// already imported is not uploaded again.
func BuildImage(ctx context.Context, opts ImageOptions) (Image, error) {
	if opts.CacheDir == "" {
		return Image{}, fmt.Errorf("lxd image: no cache dir")
	}
	if opts.Socket == "" {
		opts.Socket = DefaultSocket
	}
	if opts.Alias == "" {
		opts.Alias = DefaultImage
	}
	if opts.Suite == "" {
		opts.Suite = "bookworm"
	}
	if !suiteRE.MatchString(opts.Suite) {
		return Image{}, fmt.Errorf("lxd image: bad suite %q", opts.Suite)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	c := NewClient(opts.Socket)
	defer c.Close()
	img := Image{Alias: opts.Alias, Tarball: filepath.Join(opts.CacheDir, "muster-debian-"+opts.Suite+".tar.gz")}
	if !opts.Rebuild {
		a, err := c.ImageAlias(ctx, opts.Alias)
		if err == nil {
			img.Fingerprint = a.Target
			return img, nil
		}
		if !IsNotFound(err) {
			return Image{}, fmt.Errorf("lxd image: %w", err)
		}
	}
	if _, err := os.Stat(img.Tarball); opts.Rebuild || err != nil {
		if err := build(ctx, opts, img.Tarball); err != nil {
			return Image{}, err
		}
		img.Built = true
	}
	fp, err := fileSHA256(img.Tarball)
	if err != nil {
		return Image{}, fmt.Errorf("lxd image: %w", err)
	}
	img.Fingerprint = fp
	var existing map[string]any
	err = c.get(ctx, "/1.0/images/"+fp, &existing)
	switch {
	case IsNotFound(err):
		f, err := os.Open(img.Tarball)
		if err != nil {
			return Image{}, fmt.Errorf("lxd image: %w", err)
		}
		defer f.Close()
		got, err := c.ImportImage(ctx, f)
		if err != nil {
			return Image{}, fmt.Errorf("lxd image: import %s: %w", img.Tarball, err)
		}
		if got != fp {
			return Image{}, fmt.Errorf("lxd image: imported %s as %s, want %s", img.Tarball, got, fp)
		}
		img.Imported = true
	case err != nil:
		return Image{}, fmt.Errorf("lxd image: %w", err)
	}
	if err := c.DeleteImageAlias(ctx, opts.Alias); err != nil && !IsNotFound(err) {
		return Image{}, fmt.Errorf("lxd image: %w", err)
	}
	err = c.CreateImageAlias(ctx, ImageAlias{Name: opts.Alias, Target: fp, Description: "muster Debian " + opts.Suite + " with cloud-init"})
	if err != nil && !IsConflict(err) {
		return Image{}, fmt.Errorf("lxd image: alias %s: %w", opts.Alias, err)
	}
	return img, nil
}

// build runs the embedded build script into out.
func build(ctx context.Context, opts ImageOptions, out string) error {
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return fmt.Errorf("lxd image: debootstrap is needed to build the image (apt-get install debootstrap): %w", err)
	}
	if err := os.MkdirAll(opts.CacheDir, 0o700); err != nil {
		return fmt.Errorf("lxd image: %w", err)
	}
	// The script runs from a file: the commands it runs may read stdin.
	script := filepath.Join(opts.CacheDir, ".build-image.sh")
	if err := os.WriteFile(script, buildScript, 0o700); err != nil {
		return fmt.Errorf("lxd image: %w", err)
	}
	defer os.Remove(script)
	args := []string{script, out, opts.Suite}
	if opts.Mirror != "" {
		args = append(args, opts.Mirror)
	}
	cmd := exec.CommandContext(ctx, "bash", args...)
	var stderr bytes.Buffer
	cmd.Stdout = opts.Log
	cmd.Stderr = io.MultiWriter(opts.Log, &stderr)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("lxd image: build %s: %w: %s", out, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
