package provisioner

import (
	"context"
	"sync"
)

// pool runs jobs on a resizable set of workers (P17). Queued jobs are kept
// in the pool, not in the workers, so resizing loses nothing.
type pool struct {
	ctx      context.Context
	mu       sync.Mutex
	cond     *sync.Cond
	queue    []func(context.Context)
	size     int // wanted workers
	live     int // running workers
	busy     int
	closed   bool
	wg       sync.WaitGroup
	onChange func(queued, workers int) // called with mu held; may be nil
	onPanic  func(v any)               // a job panicked; may be nil
}

func newPool(ctx context.Context, size int, onChange func(queued, workers int)) *pool {
	p := &pool{ctx: ctx, onChange: onChange}
	p.cond = sync.NewCond(&p.mu)
	p.resize(size)
	return p
}

// submit queues a job. Jobs submitted after close are dropped.
func (p *pool) submit(job func(context.Context)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.queue = append(p.queue, job)
	p.changed()
	p.cond.Signal()
}

// resize sets the number of workers: new ones start at once, surplus ones
// end after their current job.
func (p *pool) resize(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n < 1 {
		n = 1
	}
	p.size = n
	for !p.closed && p.live < p.size {
		p.live++
		p.wg.Add(1)
		go p.worker()
	}
	p.changed()
	p.cond.Broadcast()
}

// stats returns the queue length and the number of workers.
func (p *pool) stats() (queued, workers int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue), p.size
}

func (p *pool) changed() {
	if p.onChange != nil {
		p.onChange(len(p.queue), p.size)
	}
}

// close drops queued jobs and waits for the workers; running jobs should
// end promptly because the pool's context is cancelled by its owner first.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	p.queue = nil
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *pool) worker() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && !p.closed && p.live <= p.size {
			p.cond.Wait()
		}
		if p.closed || p.live > p.size {
			p.live--
			p.mu.Unlock()
			return
		}
		job := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.busy++
		p.changed()
		p.mu.Unlock()

		p.run(job)

		p.mu.Lock()
		p.busy--
		p.mu.Unlock()
	}
}

// run runs one job, turning a panic into a call of onPanic so that a bug
// in one job ends the provisioner with an error (P20) rather than the
// process.
func (p *pool) run(job func(context.Context)) {
	defer func() {
		if v := recover(); v != nil && p.onPanic != nil {
			p.onPanic(v)
		}
	}()
	job(p.ctx)
}
