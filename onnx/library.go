package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

const (
	// Version is the ONNX Runtime release towerrl is built and tested against; `make setup`
	// installs it. Newer releases that still serve C API version [APIVersion] also load.
	Version = "1.29.0"
	// APIVersion is the ONNX Runtime C API version that onnxruntime_go v1.35.0 asks for.
	APIVersion = 29
	// LibraryEnv names the environment variable consulted when no library path is configured.
	LibraryEnv = "TOWERRL_ORT_LIB"
	// libraryFile is the file name of the CPU library inside the cache folder.
	libraryFile = "libonnxruntime.so.1"
)

// runtime is the process's one ONNX Runtime environment: ONNX Runtime keeps a single OrtEnv
// per process, so this is the only package-level state, and it is guarded.
var runtime struct {
	mu      sync.Mutex // guards every field below
	path    string     // library loaded, "" until a load succeeds
	version string     // its version string
}

// LibraryError reports an ONNX Runtime library that could not be found or loaded.
type LibraryError struct {
	Path   string // the path tried, "" when none was found
	Source string // where the path came from: "config", LibraryEnv, or "cache"
	Err    error
}

func (e *LibraryError) Error() string {
	msg := fmt.Sprintf("onnx: ONNX Runtime library (from %s): %v", e.Source, e.Err)
	if e.Source == "cache" {
		msg += fmt.Sprintf("; run `make setup` to install ONNX Runtime %s there, or set %s to the library's path", Version, LibraryEnv)
	}
	return msg
}

func (e *LibraryError) Unwrap() error { return e.Err }

// ErrLibrary is matched by every [LibraryError] through errors.Is.
var ErrLibrary = errors.New("onnx: ONNX Runtime library unavailable")

// Is makes errors.Is(err, ErrLibrary) true for library errors.
func (e *LibraryError) Is(target error) bool { return target == ErrLibrary }

// CacheDir returns the per-user folder `make setup` installs ONNX Runtime into:
// ${XDG_CACHE_HOME:-$HOME/.cache}/towerrl/onnxruntime-<Version>.
func CacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("onnx: locating the user cache folder: %w", err)
	}
	return filepath.Join(base, "towerrl", "onnxruntime-"+Version), nil
}

// LibraryPath resolves the ONNX Runtime library to load: configured when it is not empty,
// else the LibraryEnv environment variable, else the per-user cache ([CacheDir]). The path
// chosen must exist; it does not fall through to the next source when it does not.
func LibraryPath(configured string) (path, source string, err error) {
	switch {
	case configured != "":
		path, source = configured, "config"
	case os.Getenv(LibraryEnv) != "":
		path, source = os.Getenv(LibraryEnv), LibraryEnv
	default:
		dir, err := CacheDir()
		if err != nil {
			return "", "cache", &LibraryError{Source: "cache", Err: err}
		}
		path, source = filepath.Join(dir, libraryFile), "cache"
	}
	if _, err := os.Stat(path); err != nil {
		return path, source, &LibraryError{Path: path, Source: source, Err: fmt.Errorf("%s not found", path)}
	}
	return path, source, nil
}

// Init loads the ONNX Runtime library once per process; later calls return at once. path may be
// empty (see [LibraryPath] for the search order). Asking for a different library after one is
// loaded is an error: a process holds one ONNX Runtime. A failed load leaves nothing behind, so
// Init may be called again with another path. Init is safe for concurrent use.
func Init(path string) error {
	runtime.mu.Lock()
	defer runtime.mu.Unlock()
	if runtime.path != "" {
		if path != "" && filepath.Clean(path) != runtime.path {
			return &LibraryError{Path: path, Source: "config",
				Err: fmt.Errorf("ONNX Runtime is already loaded from %s in this process", runtime.path)}
		}
		return nil
	}
	resolved, source, err := LibraryPath(path)
	if err != nil {
		return err
	}
	version, err := probeLibrary(resolved, APIVersion)
	if err != nil {
		return &LibraryError{Path: resolved, Source: source, Err: err}
	}
	ort.SetSharedLibraryPath(resolved)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return &LibraryError{Path: resolved, Source: source, Err: err}
	}
	runtime.path = filepath.Clean(resolved)
	runtime.version = version
	return nil
}

// Loaded reports the library path and version in use, or empty strings before [Init] succeeds.
func Loaded() (path, version string) {
	runtime.mu.Lock()
	defer runtime.mu.Unlock()
	return runtime.path, runtime.version
}
