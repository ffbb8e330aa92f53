package batcher

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/towerrl/towerrl/envs"
)

// ErrSnapshot is wrapped by errors about a snapshot that cannot be taken or restored.
var ErrSnapshot = errors.New("batcher: snapshot")

var snapshotMagic = [8]byte{'T', 'W', 'R', 'L', 'B', 'A', 'T', '1'}

// Snapshot saves the state collection continues from: every env (see envs.Snapshotter), every
// env's action-sampling stream and its running episode return and length. With the policy's
// weights, it is what a resumed run needs to collect exactly what the interrupted one would
// have. It waits for a running Collect.
func (b *Batcher) Snapshot() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	var out bytes.Buffer
	w := func(x any) { binary.Write(&out, binary.LittleEndian, x) }
	out.Write(snapshotMagic[:])
	w(uint32(len(b.workers)))
	w(uint32(b.cfg.EnvsPerWorker))
	for _, wk := range b.workers {
		s, ok := wk.env.(envs.Snapshotter)
		if !ok {
			return nil, fmt.Errorf("%w: %s envs cannot be snapshotted", ErrSnapshot, b.cfg.Env)
		}
		env, err := s.Snapshot()
		if err != nil {
			return nil, fmt.Errorf("%w: worker %d: %v", ErrSnapshot, wk.index, err)
		}
		w(uint32(len(env)))
		out.Write(env)
		for _, p := range wk.pcgs {
			st, err := p.MarshalBinary()
			if err != nil {
				return nil, err
			}
			w(uint32(len(st)))
			out.Write(st)
		}
		w(wk.ret)
		lengths := make([]int64, len(wk.length))
		for i, l := range wk.length {
			lengths[i] = int64(l)
		}
		w(lengths)
	}
	return out.Bytes(), nil
}

// Restore sets the state saved by Snapshot on a Batcher made with the same Config. A snapshot
// that does not fit is an error, and then the Batcher may hold part of it: make a new one.
func (b *Batcher) Restore(data []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	r := bytes.NewReader(data)
	read := func(x any) error { return binary.Read(r, binary.LittleEndian, x) }
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: restoring: %s", ErrSnapshot, fmt.Sprintf(format, a...))
	}
	var magic [8]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil || magic != snapshotMagic {
		return fail("not a batcher snapshot")
	}
	var workers, m uint32
	if read(&workers) != nil || read(&m) != nil || int(workers) != len(b.workers) || int(m) != b.cfg.EnvsPerWorker {
		return fail("the snapshot is of %d workers × %d envs, this batcher has %d × %d", workers, m, len(b.workers), b.cfg.EnvsPerWorker)
	}
	chunk := func(max uint32) ([]byte, error) {
		var l uint32
		if err := read(&l); err != nil || l > max {
			return nil, fmt.Errorf("bad length %d (%v)", l, err)
		}
		buf := make([]byte, l)
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	for _, wk := range b.workers {
		env, err := chunk(1 << 30)
		if err != nil {
			return fail("worker %d env: %v", wk.index, err)
		}
		if err := wk.env.(envs.Snapshotter).Restore(env); err != nil {
			return fail("worker %d: %v", wk.index, err)
		}
		for i, p := range wk.pcgs {
			st, err := chunk(64)
			if err == nil {
				err = p.UnmarshalBinary(st)
			}
			if err != nil {
				return fail("worker %d sampling stream %d: %v", wk.index, i, err)
			}
		}
		lengths := make([]int64, len(wk.length))
		if read(wk.ret) != nil || read(lengths) != nil {
			return fail("worker %d episode counters: truncated", wk.index)
		}
		for i, l := range lengths {
			wk.length[i] = int(l)
		}
	}
	if r.Len() != 0 {
		return fail("%d bytes left over", r.Len())
	}
	return nil
}
