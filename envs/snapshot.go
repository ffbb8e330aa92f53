package envs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"
)

// ErrSnapshot is wrapped by errors about a snapshot that cannot be taken or restored.
var ErrSnapshot = errors.New("envs: snapshot")

// Snapshotter is implemented by VecEnvs whose whole state (physics, time-limit counters,
// random streams and output buffers) can be saved and restored exactly, so that a training
// run resumed from a checkpoint continues with the same trajectories. The VecEnvs of Make for
// the registered environments implement it.
type Snapshotter interface {
	// Snapshot returns the state as bytes.
	Snapshot() ([]byte, error)
	// Restore sets the state from Snapshot's bytes of a VecEnv of the same id and size.
	Restore(data []byte) error
}

// stateful is implemented by Dynamics whose per-env state is a slice of float64 fields.
type stateful interface{ stateFloats() []float64 }

// StateSaver is implemented by Dynamics whose whole state lives outside Go values (a physics
// engine's data), for the snapshots of Snapshotter: every value Step reads, so that a restored
// VecEnv continues bit for bit.
type StateSaver interface {
	// SaveState appends the state of every env to dst and returns the extended slice. Its
	// length is the same for every call on a value.
	SaveState(dst []float64) []float64
	// LoadState sets the state of every env from SaveState's values (of a Dynamics of the
	// same environment and size); it fails, changing nothing, on values of another length.
	LoadState(src []float64) error
}

// saverOf returns the state access of dyn: its own StateSaver, or one over the state view of
// the classic envs (stateful).
func saverOf(dyn Dynamics) (StateSaver, bool) {
	switch d := dyn.(type) {
	case StateSaver:
		return d, true
	case stateful:
		return viewSaver{d.stateFloats()}, true
	}
	return nil, false
}

// viewSaver is the StateSaver of a state held in a float64 view.
type viewSaver struct{ view []float64 }

func (v viewSaver) SaveState(dst []float64) []float64 { return append(dst, v.view...) }

func (v viewSaver) LoadState(src []float64) error {
	if len(src) != len(v.view) {
		return fmt.Errorf("%d state values for %d", len(src), len(v.view))
	}
	copy(v.view, src)
	return nil
}

// float64s views a slice of structs made only of float64 fields as their float64s.
func float64s[T any](s []T) []float64 {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if size%8 != 0 || len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*size/8)
}

var snapshotMagic = [8]byte{'T', 'W', 'R', 'L', 'E', 'N', 'V', '1'}

// Snapshot implements Snapshotter.
func (v *vecEnv) Snapshot() ([]byte, error) {
	st, ok := saverOf(v.dyn)
	if !ok {
		return nil, fmt.Errorf("%w: %s does not support snapshots", ErrSnapshot, v.spec.ID)
	}
	var b bytes.Buffer
	w := func(x any) { binary.Write(&b, binary.LittleEndian, x) }
	b.Write(snapshotMagic[:])
	w(uint32(len(v.spec.ID)))
	b.WriteString(v.spec.ID)
	w(uint32(v.n))
	w(v.ready)
	w(v.elapsed)
	floats := st.SaveState(nil)
	w(uint32(len(floats)))
	w(floats)
	for _, p := range v.pcgs {
		s, err := p.MarshalBinary()
		if err != nil {
			return nil, err
		}
		w(uint32(len(s)))
		b.Write(s)
	}
	for _, buf := range [][]float32{v.buf.Obs, v.buf.Rewards, v.buf.Terminated, v.buf.Truncated, v.buf.FinalObs} {
		w(buf)
	}
	return b.Bytes(), nil
}

// Restore implements Snapshotter.
func (v *vecEnv) Restore(data []byte) (err error) {
	st, ok := saverOf(v.dyn)
	if !ok {
		return fmt.Errorf("%w: %s does not support snapshots", ErrSnapshot, v.spec.ID)
	}
	r := bytes.NewReader(data)
	fail := func(what string, e error) error {
		return fmt.Errorf("%w: restoring %s: %s: %v", ErrSnapshot, v.spec.ID, what, e)
	}
	read := func(x any) error { return binary.Read(r, binary.LittleEndian, x) }
	var magic [8]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil || magic != snapshotMagic {
		return fail("header", fmt.Errorf("not an envs snapshot"))
	}
	var idLen, n, nf uint32
	if err := read(&idLen); err != nil || idLen > 256 {
		return fail("id", err)
	}
	id := make([]byte, idLen)
	if _, err := io.ReadFull(r, id); err != nil {
		return fail("id", err)
	}
	if string(id) != v.spec.ID {
		return fail("id", fmt.Errorf("the snapshot is of %s", id))
	}
	if err := read(&n); err != nil || int(n) != v.n {
		return fail("size", fmt.Errorf("the snapshot holds %d envs, this VecEnv %d (%v)", n, v.n, err))
	}
	// Decode into scratch first so that a bad snapshot leaves the VecEnv as it was.
	var ready bool
	elapsed := make([]int32, v.n)
	floats := st.SaveState(nil)
	if err := read(&ready); err != nil {
		return fail("flags", err)
	}
	if err := read(elapsed); err != nil {
		return fail("time limits", err)
	}
	if err := read(&nf); err != nil || int(nf) != len(floats) {
		return fail("physics", fmt.Errorf("%d state values for %d (%v)", nf, len(floats), err))
	}
	state := make([]float64, nf)
	if err := read(state); err != nil {
		return fail("physics", err)
	}
	pcgs := make([][]byte, v.n)
	for i := range pcgs {
		var l uint32
		if err := read(&l); err != nil || l > 64 {
			return fail("random streams", err)
		}
		pcgs[i] = make([]byte, l)
		if _, err := io.ReadFull(r, pcgs[i]); err != nil {
			return fail("random streams", err)
		}
	}
	bufs := [][]float32{make([]float32, len(v.buf.Obs)), make([]float32, v.n), make([]float32, v.n), make([]float32, v.n), make([]float32, len(v.buf.FinalObs))}
	for _, b := range bufs {
		if err := read(b); err != nil {
			return fail("buffers", err)
		}
	}
	if r.Len() != 0 {
		return fail("trailer", fmt.Errorf("%d bytes left over", r.Len()))
	}
	if err := st.LoadState(state); err != nil { // its length was checked above
		return fail("physics", err)
	}
	for i, s := range pcgs {
		if err := v.pcgs[i].UnmarshalBinary(s); err != nil {
			return fail("random streams", err)
		}
	}
	v.ready = ready
	copy(v.elapsed, elapsed)
	for k, dst := range [][]float32{v.buf.Obs, v.buf.Rewards, v.buf.Terminated, v.buf.Truncated, v.buf.FinalObs} {
		copy(dst, bufs[k])
	}
	return nil
}
