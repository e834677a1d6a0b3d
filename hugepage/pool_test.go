package hugepage

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// poolOptions are the memories a pool is tested over: hugepages (when there
// are some; else that case skips) and plain locked pages.
func poolOptions() map[string]Options {
	return map[string]Options{
		"2MiB": {PageSize: Size2M, NoFallback: true},
		"4KiB": {PageSize: Size4K},
	}
}

func newTestPool(t *testing.T, bufSize, count int, o Options) *Pool {
	t.Helper()
	if o.PageSize == Size2M {
		needHugepages(t, Size2M, (bufSize*count+int(Size2M)-1)/int(Size2M))
	}
	p, err := NewPool(bufSize, count, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPool(t *testing.T) {
	for name, o := range poolOptions() {
		t.Run(name, func(t *testing.T) {
			const count = 8
			p := newTestPool(t, 100, count, o)
			if p.BufSize() != 128 || p.Available() != count {
				t.Fatalf("BufSize() = %d, Available() = %d; want 128, %d", p.BufSize(), p.Available(), count)
			}
			if p.Region() == nil || p.Region().Len() < count*128 {
				t.Fatalf("Region() = %v, want at least %d bytes", p.Region(), count*128)
			}
			seen := map[uintptr]bool{}
			var bufs [][]byte
			for i := range count {
				b, err := p.Get()
				if err != nil {
					t.Fatalf("Get %d: %v", i, err)
				}
				a := addrOf(b)
				if len(b) != 128 || cap(b) != 128 || a%64 != 0 || seen[a] {
					t.Fatalf("Get %d: len %d cap %d at %#x (seen: %v); want a fresh 64-byte aligned 128-byte buffer", i, len(b), cap(b), a, seen[a])
				}
				seen[a] = true
				for j := range b {
					b[j] = byte(i)
				}
				bufs = append(bufs, b)
			}
			if p.Available() != 0 {
				t.Errorf("Available() = %d with every buffer out", p.Available())
			}
			if _, err := p.Get(); err != ErrExhausted {
				t.Errorf("Get from an empty pool: %v, want ErrExhausted", err)
			}
			// An append reallocates rather than spill into the neighbour.
			_ = append(bufs[0], 0xff)
			for i, b := range bufs {
				for j := range b {
					if b[j] != byte(i) {
						t.Fatalf("buffer %d byte %d = %#x, want %#x: buffers overlap", i, j, b[j], byte(i))
					}
				}
			}

			if err := p.Put(bufs[3][:10]); err != nil {
				t.Errorf("Put of a shortened buffer: %v", err)
			}
			if err := p.Put(bufs[3]); !errors.Is(err, ErrDoublePut) {
				t.Errorf("second Put of a buffer: %v, want ErrDoublePut", err)
			}
			if p.Available() != 1 {
				t.Errorf("Available() = %d after one Put, want 1", p.Available())
			}
			b, err := p.Get()
			if err != nil || addrOf(b) != addrOf(bufs[3]) {
				t.Errorf("Get after Put = %#x, %v; want the buffer just put", addrOf(b), err)
			}
			for _, b := range bufs {
				if err := p.Put(b); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			if p.Available() != count {
				t.Errorf("Available() = %d with every buffer back, want %d", p.Available(), count)
			}
		})
	}
}

func TestPoolForeignPut(t *testing.T) {
	p := newTestPool(t, 128, 4, Options{PageSize: Size4K})
	other := newTestPool(t, 128, 4, Options{PageSize: Size4K})
	b, err := p.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Put(b)
	ob, err := other.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Put(ob)
	mem := p.Region().Bytes()
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"heap buffer", make([]byte, 128)},
		{"nil", nil},
		{"another pool's buffer", ob},
		{"mid-buffer start", b[64:]},
		{"shorter capacity", b[:64:64]},
		{"straddling two buffers", mem[64 : 64+128 : 64+128]},
		{"past the last buffer", mem[4*128 : 5*128 : 5*128]},
	} {
		err := p.Put(tc.b)
		if !errors.Is(err, ErrNotPooled) {
			t.Errorf("Put(%s) = %v, want ErrNotPooled", tc.name, err)
		}
	}
	if p.Available() != 3 {
		t.Errorf("Available() = %d after refused Puts, want 3", p.Available())
	}
}

func TestPoolClose(t *testing.T) {
	live := Live()
	p, err := NewPool(64, 8, Options{PageSize: Size4K})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for range 3 {
		b, _ := p.Get()
		out = append(out, b)
	}
	p.Put(out[0])
	err = p.Close()
	if err == nil || !strings.Contains(err.Error(), "2 of 8 buffers still out") {
		t.Errorf("Close with 2 buffers out: %v, want an error saying so", err)
	}
	if Live() != live {
		t.Errorf("Live() = %d after Close, want %d: the memory must be unmapped anyway", Live(), live)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if _, err := p.Get(); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if err := p.Put(out[1]); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close: %v, want ErrClosed", err)
	}

	p2, err := NewPool(64, 2, Options{PageSize: Size4K})
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Close(); err != nil {
		t.Errorf("Close of an idle pool: %v", err)
	}
}

func TestNewPoolBadGeometry(t *testing.T) {
	for _, g := range [][2]int{{0, 1}, {64, 0}, {-1, 4}, {1 << 62, 4}, {64, 1 << 40}} {
		if p, err := NewPool(g[0], g[1], Options{PageSize: Size4K}); err == nil {
			p.Close()
			t.Errorf("NewPool(%d, %d) succeeded, want an error", g[0], g[1])
		}
	}
}

// Many goroutines share a pool that is too small for all of them: no buffer
// is ever handed to two of them at once, and all come back. Run with -race.
func TestPoolConcurrent(t *testing.T) {
	for name, o := range poolOptions() {
		t.Run(name, func(t *testing.T) {
			const count, workers, rounds = 8, 16, 2000
			p := newTestPool(t, 64, count, o)
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < rounds; {
						b, err := p.Get()
						if errors.Is(err, ErrExhausted) {
							runtime.Gosched()
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						stamp := uint64(w)<<32 | uint64(i)
						binary.LittleEndian.PutUint64(b, stamp)
						binary.LittleEndian.PutUint64(b[56:], stamp)
						runtime.Gosched()
						if binary.LittleEndian.Uint64(b) != stamp || binary.LittleEndian.Uint64(b[56:]) != stamp {
							errs <- errors.New("a buffer was handed to two goroutines at once")
							return
						}
						if err := p.Put(b); err != nil {
							errs <- err
							return
						}
						i++
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if p.Available() != count {
				t.Errorf("Available() = %d after all workers finished, want %d", p.Available(), count)
			}
		})
	}
}
