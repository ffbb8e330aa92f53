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

// Snapshots of a batcher without recurrent state are version 1; version 2 adds, after each
// worker's episode counters, every env's recurrent state.
var (
	snapshotMagic   = [8]byte{'T', 'W', 'R', 'L', 'B', 'A', 'T', '1'}
	snapshotMagicV2 = [8]byte{'T', 'W', 'R', 'L', 'B', 'A', 'T', '2'}
)

// Snapshot saves the state collection continues from: every env (see envs.Snapshotter), every
// env's action-sampling stream, its running episode return and length, and the recurrent state
// the policy carries for it (if any). With the policy's
// weights, it is what a resumed run needs to collect exactly what the interrupted one would
// have. It waits for a running Collect.
func (b *Batcher) Snapshot() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.stream != nil {
		return nil, fmt.Errorf("%w: Snapshot refused; close the stream (Stream.Close) first", ErrStreaming)
	}
	if b.cfg.Pipeline {
		return nil, fmt.Errorf("%w: a batcher with Config.Pipeline cannot be snapshotted", ErrSnapshot)
	}
	var out bytes.Buffer
	w := func(x any) { binary.Write(&out, binary.LittleEndian, x) }
	recurrent := len(b.workers) > 0 && len(b.workers[0].stIn) > 0
	if recurrent {
		out.Write(snapshotMagicV2[:])
	} else {
		out.Write(snapshotMagic[:])
	}
	w(uint32(len(b.workers)))
	w(uint32(b.cfg.EnvsPerWorker))
	for _, wk := range b.workers {
		s, ok := wk.env.(envs.Snapshotter)
		if !ok {
			return nil, fmt.Errorf("%w: %s envs cannot be snapshotted", ErrSnapshot, b.cfg.Env.ID)
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
		if recurrent {
			w(uint32(len(wk.stIn)))
			for _, st := range wk.stIn {
				w(uint32(len(st)))
				w(st)
			}
		}
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
	if b.stream != nil {
		return fmt.Errorf("%w: Restore refused; close the stream (Stream.Close) first", ErrStreaming)
	}
	r := bytes.NewReader(data)
	read := func(x any) error { return binary.Read(r, binary.LittleEndian, x) }
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: restoring: %s", ErrSnapshot, fmt.Sprintf(format, a...))
	}
	var magic [8]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil || (magic != snapshotMagic && magic != snapshotMagicV2) {
		return fail("not a batcher snapshot")
	}
	recurrent := len(b.workers) > 0 && len(b.workers[0].stIn) > 0
	switch {
	case recurrent && magic == snapshotMagic:
		return fail("the snapshot holds no recurrent state and this batcher's policy carries one; restore it with the policy it was taken with")
	case !recurrent && magic == snapshotMagicV2:
		return fail("the snapshot holds recurrent states and this batcher's policy carries none; restore it with the policy it was taken with")
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
		if !recurrent {
			continue
		}
		var k uint32
		if read(&k) != nil || int(k) != len(wk.stIn) {
			return fail("worker %d: the snapshot holds %d recurrent states, the policy carries %d", wk.index, k, len(wk.stIn))
		}
		for j, st := range wk.stIn {
			var l uint32
			if read(&l) != nil || int(l) != len(st) {
				return fail("worker %d recurrent state %d: %d values, this batcher holds %d", wk.index, j, l, len(st))
			}
			if read(st) != nil {
				return fail("worker %d recurrent state %d: truncated", wk.index, j)
			}
		}
	}
	if r.Len() != 0 {
		return fail("%d bytes left over", r.Len())
	}
	return nil
}
