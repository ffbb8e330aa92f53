package rundir

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/towerrl/towerrl/internal/bounded"
)

// ErrInitPolicyChanged is wrapped by ReadInitPolicy's error for a policy file whose SHA-256
// is not the one the run recorded: the file being fine-tuned changed since the run began.
var ErrInitPolicyChanged = errors.New("rundir: the policy being fine-tuned changed")

// ReadConfig reads the config.json of the run in dir: a regular file of at most
// bounded.ConfigLimit bytes, anything else refused before a byte is read.
func ReadConfig(dir string) ([]byte, error) {
	return bounded.ReadFile(ConfigFile, filepath.Join(dir, ConfigFile), bounded.ConfigLimit)
}

// ReadInitPolicy reads the ONNX policy a run fine-tunes (at most bounded.ModelLimit bytes)
// and returns it with its hex SHA-256. When want (the SHA-256 the run's config.json records)
// is set and differs, the error wraps ErrInitPolicyChanged and names both: a resumed run
// must fine-tune the policy it began with.
func ReadInitPolicy(path, want string) (data []byte, sum string, err error) {
	if data, err = bounded.ReadFile("InitPolicy", path, bounded.ModelLimit); err != nil {
		return nil, "", err
	}
	if sum, err = CheckInitPolicy(data, want); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return data, sum, nil
}

// CheckInitPolicy returns data's hex SHA-256, or an error wrapping ErrInitPolicyChanged when
// want is set and differs.
func CheckInitPolicy(data []byte, want string) (string, error) {
	sum := SHA256Hex(data)
	if want != "" && sum != want {
		return "", fmt.Errorf("%w: it has SHA-256 %s, the run's config.json records init_policy_sha256 %s (the file changed since the run began?)",
			ErrInitPolicyChanged, sum, want)
	}
	return sum, nil
}
