package cli

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// ProgressDelay is how long a run goes before its progress line appears:
// shorter runs print nothing but their results.
const ProgressDelay = 2 * time.Second

// Progress is a one-line status on stderr for long runs ("copy 64K [3/12]:
// engine, 0:04"). It is drawn only when stderr is a terminal, from
// ProgressDelay after the first Set on, redrawn every second with the time
// spent on the current step; Clear erases it before a result is printed, so
// it never duplicates results nor lands in a log file. The zero value and
// a Progress on a non-terminal do nothing. Stop must be called when the run
// ends.
type Progress struct {
	w     io.Writer
	tool  string
	on    bool
	delay time.Duration // ProgressDelay; shorter in tests

	mu      sync.Mutex
	text    string
	first   time.Time // the first Set
	step    time.Time // the latest Set
	shown   bool
	stop    chan struct{}
	stopped chan struct{}
}

// NewProgress returns the progress line of tool on stderr: active only when
// stderr is a terminal (IsTerminal).
func NewProgress(stderr io.Writer, tool string) *Progress {
	return &Progress{w: stderr, tool: tool, on: IsTerminal(stderr), delay: ProgressDelay}
}

// Set says what the run is doing now. The first call starts the redrawing.
func (p *Progress) Set(format string, args ...any) {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.text = fmt.Sprintf(format, args...)
	p.step = time.Now()
	if p.stop == nil {
		p.first = p.step
		p.stop, p.stopped = make(chan struct{}), make(chan struct{})
		go p.loop(p.stop, p.stopped)
	}
}

// loop redraws the line every second until stop is closed.
func (p *Progress) loop(stop, stopped chan struct{}) {
	defer close(stopped)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			if now.Sub(p.first) >= p.delay && p.text != "" {
				s := int(now.Sub(p.step).Seconds())
				fmt.Fprintf(p.w, "\r\x1b[K%s: %s, %d:%02d", p.tool, p.text, s/60, s%60)
				p.shown = true
			}
			p.mu.Unlock()
		}
	}
}

// Clear erases the line, if drawn, so that a result can be printed; the
// next redraw puts it back.
func (p *Progress) Clear() {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
}

func (p *Progress) clearLocked() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// Stop erases the line and ends the redrawing. It may be called more than
// once.
func (p *Progress) Stop() {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	stop, stopped := p.stop, p.stopped
	p.stop = nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-stopped
	}
	p.mu.Lock()
	p.clearLocked()
	p.text = ""
	p.mu.Unlock()
}
