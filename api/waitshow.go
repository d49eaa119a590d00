package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/musterhq/muster"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// WaitShowing is Wait (WaitFailFast with failFast) that shows progress on
// w, labelled with what and the machines' phases (Progress): a bar on a
// terminal, a line on each change otherwise. Interrupted (ctx cancelled),
// it says that the controller carries on with the machines.
func (c *Client) WaitShowing(ctx context.Context, model string, goals map[string]Goal, w io.Writer, what string, failFast bool) ([]string, error) {
	if len(goals) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(goals))
	for id := range goals {
		ids = append(ids, id)
	}
	muster.SortMachineIDs(ids)
	p := newProgress(w, len(goals), what)
	defer p.finish()
	failures, err := c.wait(ctx, model, goals, func(st Status, done int, _ []string) {
		p.update(done, Progress(st, ids))
	}, failFast)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted while %s: the controller carries on with the machines (muster status shows them)", what)
	}
	return failures, err
}

// FailureError reports machines that ended in error after a wait of
// total machines (0: not said), or nil when none did.
func FailureError(failures []string, total int) error {
	if len(failures) == 0 {
		return nil
	}
	const show = 5
	msg := strings.Join(failures[:min(show, len(failures))], "; ")
	if len(failures) > show {
		msg += fmt.Sprintf("; and %d more", len(failures)-show)
	}
	if total > len(failures) {
		msg += " (any others keep provisioning)"
	}
	return fmt.Errorf("%d machine(s) did not provision: %s", len(failures), msg)
}

// IsTerminal says whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

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
	if IsTerminal(w) {
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

// update sets the number done and a short account of the machines.
func (p *progress) update(done int, detail string) {
	detail = muster.Printable(detail) // it quotes provisioner errors (S8)
	if p.bar != nil {
		p.bar.Describe(p.what + ": " + detail)
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
