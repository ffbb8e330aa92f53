// Package mujoco registers Gymnasium's MuJoCo v4 environments with envs: HalfCheetah-v4,
// Hopper-v4, Walker2d-v4, Ant-v4, Humanoid-v4, HumanoidStandup-v4, Swimmer-v4,
// InvertedPendulum-v4, InvertedDoublePendulum-v4, Reacher-v4 and Pusher-v4, with v4's default
// constructor arguments. Import it for its side effect:
//
//	import _ "github.com/towerrl/towerrl/envs/mujoco"
//
// # Building
//
// The envs run on the MuJoCo C library, 2.2.2 as Debian packages it (apt-get install
// libmujoco-dev), through cgo, in builds with the tag mujoco (the Makefile adds it where the
// library is installed). Without the tag or without cgo the package still builds: the ids are
// then known but unavailable, and envs.Make says how to get them (ErrNotBuilt).
//
// # Fidelity
//
// The model files under assets/ carry the published models' parameters (Gymnasium's
// gymnasium/envs/mujoco/assets, named in each file's header). Observations, rewards, health
// checks, termination, frame skip, time limits, reset noise and action bounds are v4's:
// Gymnasium's do_simulation (ctrl = action, mj_step × frame_skip, then mj_rnePostConstraint
// where cfrc_ext is read) and each env's step, in the same order; positions read after a step
// are MuJoCo's arrays as mj_step leaves them, as Gymnasium reads them. MuJoCo clamps ctrl to
// ctrlrange (every actuator here is ctrllimited), while the control costs charge the action as
// given, as under Gymnasium. MuJoCo 2.2.2 is close to, not bit-identical with, the 2.3.x most
// Gymnasium users run (see ../../docs/mujoco.md); reset noise has v4's distributions drawn from
// towerrl's own seeded streams.
//
// # Lifecycle, threading, ownership
//
// Each environment's model is compiled once per process, on first use, and shared read-only;
// each env has its own mjData (about 3.3 MB), freed by the VecEnv's Close. A VecEnv steps all
// its envs in one cgo call per Step, allocates nothing in steady state, and with
// envs.Config.Threads steps shards on several goroutines. Snapshots (envs.Snapshotter) keep
// what mj_step reads (the solver's warm start included) and the derived arrays the observations
// read, so a restored VecEnv continues bit for bit. envs.PhysicsOf gives qpos and qvel and
// Gymnasium's set_state. MuJoCo's internal errors never end the process: they become errors
// (an env that meets one ends its episode as terminated, reward 0), and its warnings, which
// MuJoCo would print and write to MUJOCO_LOG.TXT, are silenced.
//
// # Rendering
//
// Each env registers a camera with package envs/render (render.FilmOf, which eval --gif and
// train --gif-every use): MuJoCo's own renderer draws recorded states offscreen at Gymnasium's
// 480×480 through the camera Gymnasium's released v4 envs use (the model's "track" camera, or
// a free camera set from the env's DEFAULT_CAMERA_CONFIG), in an EGL context with no display
// or window (Mesa's surfaceless platform, else EGL's default display). libEGL is opened with
// dlopen when a film is first made, so the envs build and run without it; where it or Mesa's
// driver is missing, making the film is an error (ErrNoRenderer) that names the Debian
// packages to install. An EGL context is current on one thread: a film locks its goroutine to
// its OS thread while it draws, and frees its context when done.
package mujoco
