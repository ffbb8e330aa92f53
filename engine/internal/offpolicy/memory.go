package offpolicy

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/models"
)

// Memory is an off-policy learner's replay buffer (engine/replay) and the minibatch it
// samples into: what the learner keeps between the engine's collections.
type Memory struct {
	Buf   *replay.Buffer
	Batch *replay.Batch
}

// MemoryConfig is the buffer's capacity and row widths (a discrete action is one value) and
// the rows of each minibatch.
func MemoryConfig(capacity, obsDim, actDim int) replay.Config {
	return replay.Config{Capacity: capacity, ObsDim: obsDim, ActDim: actDim}
}

// NewMemory allocates a buffer of capacity transitions (after replay.Check) and a minibatch
// of minibatch rows.
func NewMemory(capacity, obsDim, actDim, minibatch int) (*Memory, error) {
	buf, err := replay.New(MemoryConfig(capacity, obsDim, actDim))
	if err != nil {
		return nil, err
	}
	return &Memory{Buf: buf, Batch: replay.NewBatch(minibatch, obsDim, actDim)}, nil
}

// Sample draws a minibatch uniformly from the buffer with rng.
func (m *Memory) Sample(rng *rand.Rand) (*replay.Batch, error) {
	if err := m.Buf.Sample(rng, m.Batch); err != nil {
		return nil, err
	}
	return m.Batch, nil
}

// Filled is the transitions stored, the snapshot's bytes now, and its bytes when full.
func (m *Memory) Filled() (n int, now, full int64) {
	cfg := m.Buf.Config()
	return m.Buf.Len(), m.Buf.SnapshotSize(), 4 * int64(cfg.Capacity) * int64(2*cfg.ObsDim+cfg.ActDim+3)
}

// checkpointKey is the checkpoint entry of the buffer's snapshot.
const checkpointKey = "replay"

// Store puts the buffer's snapshot into c.
func (m *Memory) Store(c *models.Checkpoint) error {
	var b bytes.Buffer
	b.Grow(int(m.Buf.SnapshotSize()))
	if _, err := m.Buf.WriteTo(&b); err != nil {
		return err
	}
	c.Bytes[checkpointKey] = b.Bytes()
	return nil
}

// Load restores the buffer from c's snapshot; held is false (and the buffer left empty) when
// c holds none (a run with no_buffer_checkpoint).
func (m *Memory) Load(c *models.Checkpoint) (held bool, err error) {
	snap, ok := c.Bytes[checkpointKey]
	if !ok {
		return false, nil
	}
	if _, err := m.Buf.ReadFrom(bytes.NewReader(snap)); err != nil {
		return true, fmt.Errorf("the checkpoint's replay buffer: %w", err)
	}
	return true, nil
}

// CheckMemory returns the error NewMemory would for a buffer of capacity transitions, before
// anything is allocated (replay.Check: a capacity the memory available cannot hold), naming
// the buffer_size setting.
func CheckMemory(capacity, obsDim, actDim int) error {
	if err := replay.Check(MemoryConfig(capacity, obsDim, actDim)); err != nil {
		return fmt.Errorf("buffer_size %d: %w; use a smaller buffer_size", capacity, err)
	}
	return nil
}
