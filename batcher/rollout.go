package batcher

// Rollout holds T steps of N envs in columnar, time-major buffers allocated once: the row of
// env i at step t is t·N+i. Worker w writes the envs [w·M, (w+1)·M) only, so workers never
// write the same memory. A Rollout returned by Collect belongs to the Batcher and stays valid
// until the next Collect; one returned by Stream.Next belongs to the caller until it releases
// its slot (see Stream).
type Rollout struct {
	T, N     int   // steps collected per env, envs
	ObsShape []int // shape of one observation
	ObsDim   int   // elements per observation
	ActDim   int   // elements per action (1 for a Discrete space)
	Discrete bool  // actions are indices into a Discrete space

	Obs []float32 // [T×N×ObsDim] observation at step t
	// Actions [T×N×ActDim] are the raw actions LogP refers to: a Discrete action's index, a
	// Gaussian's unclipped draw. For a tanh-gaussian head (SAC) they are the Gaussian draw u
	// before tanh, and LogP is the Gaussian log-density of u WITHOUT the tanh correction
	// Σ log(1 − tanh²u): the correction depends on u alone, so it cancels in a ratio of
	// probabilities such as PPO's, and a learner treats the head as a Gaussian over u.
	Actions []float32
	// EnvActions [T×N×ActDim] are the actions the envs took: a Box's clipped to bounds; a
	// tanh-gaussian's tanh(u) mapped onto the bounds (unless --action-scale none).
	EnvActions []float32
	Rewards    []float32 // [T×N]
	Terminated []float32 // [T×N] 1 where the episode ended by the env's rule
	Truncated  []float32 // [T×N] 1 where the episode hit its time limit
	FinalObs   []float32 // [T×N×ObsDim] last observation of an episode that ended at step t, else stale
	LogP       []float32 // [T×N] log-probability of Actions; 0 for a deterministic-only policy
	Values     []float32 // [T×N]
	Version    []int64   // [T×N] version of the policy that chose the action
	LastObs    []float32 // [N×ObsDim] observation after the last step, to bootstrap from
	LastValues []float32 // [N] the policy's value of LastObs (0 without a value output)
	// FinalValues [T×N] holds the value of FinalObs where an episode was truncated and not
	// terminated (stale elsewhere): what bootstrapping at truncation needs.
	FinalValues []float32
	Episodes    []Episode // episodes that ended during the rollout, in worker then step order
	// EpisodeStarts [T×N] is 1 where step t is the first of env i's episode (the env was reset
	// before it), else 0.
	EpisodeStarts []float32

	// Recurrent state, for a policy that carries one (empty otherwise). The batcher keeps
	// each env's state between steps and zeroes it when the env's episode starts, so a learner
	// replays env i's rollout from any step t on from States: the state fed at t, then at each
	// later step the state the policy output at the step before, or zeros where
	// EpisodeStarts[t·N+i] is 1.
	//
	// StateNames names each state by the graph input it feeds. StateShapes[k] is one env's
	// state k with the batch axis removed (RLlib's [hidden], SB3-contrib's [layers, hidden]
	// from [layers, batch, hidden]). States[k] holds [T×N × StateShapes[k]]: the state k fed
	// to the policy at step t for env i is States[k][(t·N+i)·S : (t·N+i+1)·S], S the product
	// of StateShapes[k], to be placed at index i of the graph input's batch axis
	// (layout.State.BatchAxis). InitialState[k] is its first step, States[k][:N·S].
	StateNames   []string
	StateShapes  [][]int
	States       [][]float32
	InitialState [][]float32

	// Physical state, for a simulated env (envs.Physics: the MuJoCo envs), else empty: QPos
	// [T×N×NQ] and QVel [T×N×NV] hold env i's qpos and qvel at step t, the state the
	// observation at t was read from (D4RL's infos/qpos and infos/qvel).
	NQ, NV     int
	QPos, QVel []float64
}

// allocPhysics makes QPos and QVel for nq and nv values per row.
func (r *Rollout) allocPhysics(nq, nv int) {
	r.NQ, r.NV = nq, nv
	r.QPos, r.QVel = make([]float64, r.T*r.N*nq), make([]float64, r.T*r.N*nv)
}

// Episode is a finished episode's summary.
type Episode struct {
	Env     int     // global env index
	Return  float64 // undiscounted sum of rewards
	Length  int     // steps
	Version int64   // policy version of its last step
}

func newRollout(t, n int, obsShape []int, actDim int, discrete bool) *Rollout {
	od := 1
	for _, d := range obsShape {
		od *= d
	}
	return &Rollout{
		T: t, N: n, ObsShape: obsShape, ObsDim: od, ActDim: actDim, Discrete: discrete,
		Obs: make([]float32, t*n*od), Actions: make([]float32, t*n*actDim), EnvActions: make([]float32, t*n*actDim),
		Rewards: make([]float32, t*n), Terminated: make([]float32, t*n), Truncated: make([]float32, t*n),
		FinalObs: make([]float32, t*n*od), LogP: make([]float32, t*n), Values: make([]float32, t*n),
		Version: make([]int64, t*n), LastObs: make([]float32, n*od), LastValues: make([]float32, n),
		FinalValues: make([]float32, t*n), EpisodeStarts: make([]float32, t*n),
	}
}

// allocStates makes States and InitialState for StateNames and StateShapes, T×N rows each.
func (r *Rollout) allocStates() {
	for _, shape := range r.StateShapes {
		size := 1
		for _, d := range shape {
			size *= d
		}
		all := make([]float32, r.T*r.N*size)
		r.States = append(r.States, all)
		r.InitialState = append(r.InitialState, all[:r.N*size])
	}
}

// NextObs returns the observation that followed step t of env i: the episode's final
// observation when it ended at t, else the next step's observation.
func (r *Rollout) NextObs(t, i int) []float32 {
	row := t*r.N + i
	switch {
	case r.Terminated[row] != 0 || r.Truncated[row] != 0:
		return r.FinalObs[row*r.ObsDim : (row+1)*r.ObsDim]
	case t+1 < r.T:
		next := row + r.N
		return r.Obs[next*r.ObsDim : (next+1)*r.ObsDim]
	}
	return r.LastObs[i*r.ObsDim : (i+1)*r.ObsDim]
}
