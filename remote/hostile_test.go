package remote

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/envs"
)

// hostileSpec is the run the hostile client attacks: CartPole-v1, 16 steps × 2 envs.
func hostileSpec(t *testing.T) *Spec {
	env, err := envs.Lookup("CartPole-v1")
	if err != nil {
		t.Fatal(err)
	}
	return &Spec{Env: env, T: 16, N: 2}
}

// cartPoleRollout is a rollout a CartPole-v1 batcher could have collected with version
// (every row), its values drawn from seed: one episode ends (terminated) at row 5.
func cartPoleRollout(T, N int, version int64, seed uint64) *batcher.Rollout {
	rng := rand.New(rand.NewPCG(seed, 3))
	rows := T * N
	f := func(n int, gen func() float32) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = gen()
		}
		return s
	}
	normal := func() float32 { return float32(rng.NormFloat64()) }
	zero := func() float32 { return 0 }
	r := &batcher.Rollout{T: T, N: N, ObsDim: 4, ActDim: 1, ObsShape: []int{4}, Discrete: true,
		Obs: f(rows*4, normal), Actions: f(rows, func() float32 { return float32(rng.IntN(2)) }),
		Rewards: f(rows, func() float32 { return 1 }), Terminated: f(rows, zero), Truncated: f(rows, zero),
		LogP: f(rows, normal), Values: f(rows, normal), EpisodeStarts: f(rows, zero), Version: make([]int64, rows),
		FinalObs: f(rows*4, zero), FinalValues: f(rows, zero), LastObs: f(N*4, normal), LastValues: f(N, normal),
		Episodes: []batcher.Episode{{Env: 1, Return: 3, Length: 3, Version: version}}}
	r.EnvActions = r.Actions
	r.Terminated[5] = 1
	copy(r.FinalObs[5*4:6*4], []float32{0.1, 0.2, 0.3, 0.4})
	for i := range r.Version {
		r.Version[i] = version
	}
	return r
}

// hostileClient publishes whatever it likes with batcher credentials, as any holder of one
// could: rollout messages it encodes itself, raw chunks. It sends as batcher id with id's
// credential (issued on first use).
type hostileClient struct {
	t     *testing.T
	s     *Server
	js    map[string]jetstream.JetStream // by batcher ID
	names names
	codec *codec
	seq   uint64
}

func newHostile(t *testing.T, s *Server) *hostileClient {
	return &hostileClient{t: t, s: s, js: map[string]jetstream.JetStream{}, names: s.names, codec: newCodec(0)}
}

// as is the JetStream context of batcher id's credential.
func (h *hostileClient) as(id string) jetstream.JetStream {
	if js := h.js[id]; js != nil {
		return js
	}
	nc, _ := rawConn(h.t, h.s, id)
	js, err := jetstream.New(nc)
	if err != nil {
		h.t.Fatal(err)
	}
	h.js[id] = js
	return js
}

// send encodes m as batcher id (a fresh sequence number) and publishes its chunks.
func (h *hostileClient) send(id string, m RolloutMsg, kind Codec) rolloutKey {
	h.t.Helper()
	h.seq++
	m.BatcherID, m.Session, m.Seq = id, 0xbad, h.seq
	chunks, err := h.codec.message(&m, kind)
	if err != nil {
		h.t.Errorf("encoding %s's rollout: %v", id, err)
	}
	for i, c := range chunks {
		h.raw(id, fmt.Sprintf("%s.%d.%d", id, h.seq, i), c)
	}
	return rolloutKey{batcher: id, session: 0xbad, seq: h.seq}
}

// raw publishes one chunk payload on batcher id's subject, trying again for 20 s while the
// stream is full (as a batcher does).
func (h *hostileClient) raw(id, msgID string, data []byte) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msg := &nats.Msg{Subject: h.names.rolloutSubject(id), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	for {
		_, err := h.as(id).PublishMsg(ctx, msg)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			h.t.Errorf("publishing %s's chunk: %v", id, err)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pack is Pack of r for env, failing the test on error.
func pack(t *testing.T, env string, r *batcher.Rollout) RolloutMsg {
	t.Helper()
	m, err := Pack(env, r)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bomb is a rollout message of the run's T and N whose obs column claims 240M values
// (960 MB) and whose S2 payload, a few bytes, declares as much: decoding it would allocate
// the lot before failing (issue 28, item 9a).
func bomb(t *testing.T, id string, seq uint64) []byte {
	m := pack(t, "CartPole-v1", cartPoleRollout(16, 2, 0, 9))
	m.BatcherID, m.Session, m.Seq = id, 0xbad, seq
	m.Columns = slices.DeleteFunc(m.Columns, func(c Column) bool { return c.Name != colObs })
	c := newCodec(0)
	blob, err := c.encode(&m, CodecS2)
	if err != nil {
		t.Fatal(err)
	}
	const claim = 240_000_000
	// Rewrite the header: the obs column's length and the raw length claim 960 MB, the payload
	// is an S2 block that declares as much, and the checksum is made to hold.
	r := reader{b: blob}
	r.magic(rolloutMagic, "rollout")
	r.take(4 + 8*3 + 4*4)
	r.str()
	r.str()
	r.u16()
	r.str()
	r.u8()
	lenAt := r.off
	binary.LittleEndian.PutUint64(blob[lenAt:], claim)
	binary.LittleEndian.PutUint64(blob[lenAt+8:], 4*claim)
	payload := binary.AppendUvarint(nil, 4*claim)
	payload = append(payload, make([]byte, 64)...)
	blob = append(blob[:lenAt+8+8], binary.LittleEndian.AppendUint64(nil, uint64(len(payload)))...)
	blob = append(blob, payload...)
	blob = binary.LittleEndian.AppendUint32(blob, crc32.Checksum(blob, castagnoli))
	chunks, err := c.chunks(&m, blob)
	if err != nil {
		t.Fatal(err)
	}
	return chunks[0]
}

// TestHostileRollouts is the test client of issue 28 (items 6–10): with the batcher
// credential it sends rollouts of wrong shapes, NaN and ±Inf values, out-of-range actions,
// another env, T and N, a decompression bomb, a chunk claiming a gigabyte, unfinished
// rollouts enough to fill the stream's message bound, and stale and future versions, between
// good rollouts. The learner's Source hands out every good rollout, bit for bit, and none of
// the others; each is dropped, acknowledged, and counted with its reason and batcher ID;
// decoding them all allocates less than 64 MB; and a learner started again on the store
// (a resume at an earlier version) refuses the rollouts of versions it never had.
func TestHostileRollouts(t *testing.T) {
	spec := hostileSpec(t)
	store := t.TempDir()
	s := serve(t, ServeConfig{StoreDir: store, Spec: spec, StreamMaxMsgs: 64})
	ctx := timeout(t, 60*time.Second)
	src, err := NewSource(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for v := range int64(3) {
		if err := src.Publish(ctx, v, []byte("policy "+strconv.Itoa(int(v)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h := newHostile(t, s)

	good := func(k int) *batcher.Rollout { return cartPoleRollout(16, 2, 2, uint64(100+k)) }
	type bad struct {
		name, reason string
		edit         func(r *batcher.Rollout, m *RolloutMsg)
	}
	setF32 := func(name string, i int, v float32) func(*batcher.Rollout, *RolloutMsg) {
		return func(_ *batcher.Rollout, m *RolloutMsg) { m.Column(name).F32[i] = v }
	}
	cases := []bad{
		{"obs of 8 per row", refusedShape, func(r *batcher.Rollout, m *RolloutMsg) {
			r.ObsDim, r.ObsShape, r.Obs, r.FinalObs, r.LastObs = 8, []int{8}, slices.Repeat(r.Obs, 2), slices.Repeat(r.FinalObs, 2), slices.Repeat(r.LastObs, 2)
			*m = pack(t, "CartPole-v1", r)
		}},
		{"obs of 2 per row", refusedShape, func(r *batcher.Rollout, m *RolloutMsg) {
			r.ObsDim, r.ObsShape = 2, []int{2}
			*m = pack(t, "CartPole-v1", r)
		}},
		{"3 action values", refusedShape, func(r *batcher.Rollout, m *RolloutMsg) {
			r.ActDim, r.Discrete, r.Actions = 3, false, slices.Repeat(r.Actions, 3)
			r.EnvActions = r.Actions
			*m = pack(t, "CartPole-v1", r)
		}},
		{"continuous actions", refusedShape, func(r *batcher.Rollout, m *RolloutMsg) {
			r.Discrete = false
			*m = pack(t, "CartPole-v1", r)
		}},
		{"another env", refusedEnv, func(_ *batcher.Rollout, m *RolloutMsg) { m.EnvID = "Acrobot-v1" }},
		{"T of 8", refusedShape, func(r *batcher.Rollout, m *RolloutMsg) { r.T = 8; *m = pack(t, "CartPole-v1", r) }},
		{"N of 1", refusedShape, func(r *batcher.Rollout, m *RolloutMsg) { r.N = 1; *m = pack(t, "CartPole-v1", r) }},
		{"an extra column", refusedShape, func(_ *batcher.Rollout, m *RolloutMsg) {
			m.Columns = append(m.Columns, Column{Name: "extra", F32: make([]float32, 1000)})
		}},
		{"NaN reward", refusedValue, setF32(colRewards, 5, float32(math.NaN()))},
		{"+Inf observation", refusedValue, setF32(colObs, 9, float32(math.Inf(1)))},
		{"NaN logp", refusedValue, setF32(colLogP, 0, float32(math.NaN()))},
		{"-Inf value", refusedValue, setF32(colValues, 31, float32(math.Inf(-1)))},
		{"NaN last value", refusedValue, setF32(colLastValues, 1, float32(math.NaN()))},
		{"truncated 0.5", refusedValue, setF32(colTruncated, 5, 0.5)},
		{"final observations missing", refusedShape, func(_ *batcher.Rollout, m *RolloutMsg) {
			m.Column(colFinalObs).F32 = []float32{}
		}},
		{"action 7", refusedAction, setF32(colActions, 4, 7)},
		{"action -1", refusedAction, setF32(colActions, 4, -1)},
		{"action 1e9", refusedAction, setF32(colActions, 4, 1e9)},
		{"action 0.5", refusedAction, setF32(colActions, 4, 0.5)},
		{"version MinInt64", refusedVersion, func(_ *batcher.Rollout, m *RolloutMsg) {
			m.Column(colVersion).I64[7] = math.MinInt64
		}},
		{"version -1", refusedVersion, func(_ *batcher.Rollout, m *RolloutMsg) { m.Column(colVersion).I64[0] = -1 }},
		{"version MinInt64 in the first row", refusedVersion, func(_ *batcher.Rollout, m *RolloutMsg) {
			m.Column(colVersion).I64[0] = math.MinInt64
		}},
		{"future version", refusedVersion, func(_ *batcher.Rollout, m *RolloutMsg) { m.Column(colVersion).I64[0] = 3 }},
		{"episode return NaN", refusedValue, func(_ *batcher.Rollout, m *RolloutMsg) {
			m.Column(colEpisodeReturn).F64[0] = math.NaN()
		}},
	}

	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	// The rollouts, messages and chunks are made here; a goroutine sends them while the
	// learner takes rollouts (its consumer hands one over at a time).
	var goods []*batcher.Rollout
	var sends []func()
	want := map[string]string{} // batcher ID → reason
	sendGood := func(k int) {
		r := good(k)
		goods = append(goods, meaningful(r))
		m := pack(t, "CartPole-v1", r)
		sends = append(sends, func() { h.send("honest", m, CodecS2) })
	}
	for k, c := range cases {
		sendGood(k)
		r := good(1000 + k)
		m := pack(t, "CartPole-v1", r)
		c.edit(r, &m)
		id := fmt.Sprintf("evil-%d", k)
		want[id] = c.reason
		sends = append(sends, func() { h.send(id, m, []Codec{CodecS2, CodecZstd, CodecNone}[k%3]) })
	}
	// A decompression bomb, and a chunk that claims a rollout of a gigabyte in 1000 chunks.
	want["bomb"] = refusedShape
	b := bomb(t, "bomb", 1)
	sends = append(sends, func() { h.raw("bomb", "bomb.1.0", b) })
	want["claim"] = refusedSize
	claim := pack(t, "CartPole-v1", good(7))
	claim.BatcherID, claim.Session, claim.Seq = "claim", 1, 1
	chunks, err := newCodec(1024).message(&claim, CodecNone)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint16(chunks[0][8:], 1000)
	binary.LittleEndian.PutUint64(chunks[0][28:], 900<<20)
	sends = append(sends, func() { h.raw("claim", "claim.1.0", chunks[0]) })
	// 64 first chunks that never complete, each as another batcher: StreamMaxMsgs is 64.
	for k := range 64 {
		id := fmt.Sprintf("unfinished-%d", k)
		m := pack(t, "CartPole-v1", good(2000+k))
		m.BatcherID, m.Session, m.Seq = id, 1, 1
		chunks, err := newCodec(512).message(&m, CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		sends = append(sends, func() { h.raw(id, id+".1.0", chunks[0]) })
	}
	for k := range 4 { // the honest batcher still gets through
		sendGood(len(cases) + k)
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for _, f := range sends {
			f()
		}
	}()

	for k, w := range goods {
		got, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("good rollout %d of %d: %v", k+1, len(goods), err)
		}
		if got.BatcherID != "honest" {
			t.Fatalf("rollout %d came from %s", k+1, got.BatcherID)
		}
		if d := diffRollouts(w, got.Rollout); d != "" {
			t.Fatalf("good rollout %d differs (-sent +got):\n%s", k+1, d)
		}
		if err := got.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	<-sent
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("the hostile rollouts cost %d MB of allocations, want < 64", alloc>>20)
	}
	st := src.Stats()
	for id, reason := range want {
		if st.RefusedBatchers[id] != 1 {
			t.Errorf("%s (%s): refused %d times, want once", id, reason, st.RefusedBatchers[id])
		}
	}
	for reason, n := range map[string]int64{refusedShape: 9, refusedEnv: 1, refusedValue: 7, refusedAction: 4, refusedVersion: 4, refusedSize: 1} {
		if st.RefusedReasons[reason] != n {
			t.Errorf("refused for %s: %d, want %d (all: %v)", reason, st.RefusedReasons[reason], n, st.RefusedReasons)
		}
	}
	if st.RefusedReasons[refusedPending] < 64-int64(s.cfg.MaxPending) {
		t.Errorf("unfinished rollouts dropped: %d, want at least %d", st.RefusedReasons[refusedPending], 64-s.cfg.MaxPending)
	}

	// Rollouts of versions 1 and 2 stored with no learner running; the learner restarts on
	// the store at version 1 (a resume from an earlier checkpoint): version 2 is one it never
	// had, version 1 it had.
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := serve(t, ServeConfig{StoreDir: store, Spec: spec, StreamMaxMsgs: 64})
	h = newHostile(t, s2)
	h.send("before", pack(t, "CartPole-v1", cartPoleRollout(16, 2, 2, 1)), CodecS2)
	older := cartPoleRollout(16, 2, 1, 2)
	h.send("before", pack(t, "CartPole-v1", older), CodecS2)
	src2, err := NewSource(ctx, s2)
	if err != nil {
		t.Fatal(err)
	}
	defer src2.Close()
	if err := src2.Publish(ctx, 1, []byte("policy 1 again")); err != nil {
		t.Fatal(err)
	}
	if err := src2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := src2.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffRollouts(meaningful(older), got.Rollout); d != "" {
		t.Fatalf("after the restart the learner got (-want +got):\n%s", d)
	}
	if err := got.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if st := src2.Stats(); st.RefusedReasons[refusedVersion] != 1 || st.RefusedBatchers["before"] != 1 {
		t.Errorf("after the restart: refused %v from %v, want one of version 2 from \"before\"", st.RefusedReasons, st.RefusedBatchers)
	}
	// A rollout of version 2 after the restarted learner published its own version 2.
	if err := src2.Publish(ctx, 2, []byte("policy 2, the resumed run's")); err != nil {
		t.Fatal(err)
	}
	if err := src2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := cartPoleRollout(16, 2, 2, 3)
	h.send("after", pack(t, "CartPole-v1", fresh), CodecS2)
	if got, err = src2.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if d := diffRollouts(meaningful(fresh), got.Rollout); d != "" {
		t.Fatalf("a rollout of the resumed run's version 2 (-want +got):\n%s", d)
	}
	if err := got.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}
