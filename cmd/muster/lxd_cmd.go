package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/musterhq/muster/lxd"
	"github.com/spf13/cobra"
)

func newLXDCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "lxd", Short: "Prepare the local LXD daemon for lxd models", Args: cobra.NoArgs}
	var dataDir string
	opts := lxd.ImageOptions{}
	build := &cobra.Command{
		Use:   "build-image",
		Short: "Make sure LXD has the Debian image with cloud-init that lxd models boot (built once with debootstrap, cached)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.CacheDir == "" {
				opts.CacheDir = filepath.Join(dataDir, "lxd")
			}
			return buildLXDImage(cmd.Context(), opts, cmd.ErrOrStderr(), cmd.OutOrStdout())
		},
	}
	f := build.Flags()
	f.StringVar(&dataDir, "data-dir", defaultDataDir(), "the controller's data dir: the image tarball is cached in <data-dir>/lxd")
	f.StringVar(&opts.CacheDir, "cache-dir", "", "directory of the cached image tarball (default <data-dir>/lxd)")
	f.StringVar(&opts.Socket, "socket", lxd.DefaultSocket, "the LXD daemon's unix socket")
	f.StringVar(&opts.Alias, "alias", lxd.DefaultImage, "image alias (a model's image= config)")
	f.StringVar(&opts.Mirror, "mirror", "", "Debian mirror for debootstrap (default Debian's)")
	f.BoolVar(&opts.Rebuild, "rebuild", false, "build and import the image even when the alias or the cached tarball exists")
	cmd.AddCommand(build)
	return cmd
}

// buildLXDImage runs lxd.BuildImage, its build log to log, and tells w the
// alias and fingerprint.
func buildLXDImage(ctx context.Context, opts lxd.ImageOptions, log, w io.Writer) error {
	opts.Log = log
	img, err := lxd.BuildImage(ctx, opts)
	if err != nil {
		return err
	}
	how := "existing"
	if img.Built {
		how = "built"
	} else if img.Imported {
		how = "imported from " + img.Tarball
	}
	fmt.Fprintf(w, "lxd image %s: fingerprint %s (%s)\n", img.Alias, img.Fingerprint, how)
	return nil
}
