package cli

// The binaries run every env towerrl ships: the classic ones of envs and, in a build with the
// mujoco tag (see envs/mujoco), Gymnasium's MuJoCo v4 envs; without it those ids say how to
// get them.
import _ "github.com/towerrl/towerrl/envs/mujoco"
