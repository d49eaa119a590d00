package main

import (
	"fmt"
	"io"
	"os"

	"github.com/musterhq/muster"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress reports convergence toward a target count: a bar on a terminal,
// plain lines (only when something changed) otherwise.
type progress struct {
	w     io.Writer
	what  string
	bar   *progressbar.ProgressBar
	total int
	last  string
}

func newProgress(w io.Writer, total int, what string) *progress {
	p := &progress{w: w, total: total, what: what}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetElapsedTime(true),
		)
	}
	return p
}

// update sets the number done and a short summary of the other states.
func (p *progress) update(done int, detail string) {
	detail = muster.Printable(detail) // it quotes provisioner errors (S8)
	if p.bar != nil {
		p.bar.Describe(detail)
		_ = p.bar.Set(done)
		return
	}
	line := fmt.Sprintf("%s %d/%d: %s", p.what, done, p.total, detail)
	if line != p.last {
		fmt.Fprintln(p.w, line)
		p.last = line
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
	}
}
