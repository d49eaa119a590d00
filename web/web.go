// Package web holds the dashboard's assets — hand-written HTML, CSS and
// JavaScript, embedded in the binary with no build step — that the API
// server serves at / and /static/.
package web

import (
	"embed"
	"io/fs"
)

//go:embed index.html signin.html static
var files embed.FS

// Pages holds the dashboard's HTML pages: index.html (the dashboard,
// served only to a signed-in browser) and signin.html (an html/template
// shown to everybody else).
var Pages fs.FS = files

// Static is the tree served under /static/: style.css, app.js, icon.svg.
var Static fs.FS = mustSub(files, "static")

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err) // the embed pattern above guarantees dir exists
	}
	return sub
}
