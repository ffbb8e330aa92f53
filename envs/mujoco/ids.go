package mujoco

import "errors"

// ErrNotBuilt is the reason Lookup, Make and New give for these ids in a build without MuJoCo.
var ErrNotBuilt = errors.New("mujoco: this build has no MuJoCo: install the library " +
	"(apt-get install libmujoco-dev, or `make setup`, which does it as root) and build with " +
	"-tags mujoco and cgo enabled (the Makefile adds the tag where the library is installed)")

// IDs are the Gymnasium ids this package registers (in a build with MuJoCo; see the package
// documentation), with v4's default constructor arguments.
var IDs = []string{
	"HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4", "HumanoidStandup-v4",
	"Swimmer-v4", "InvertedPendulum-v4", "InvertedDoublePendulum-v4", "Reacher-v4", "Pusher-v4",
}
