package remote

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/towerrl/towerrl/internal/atomicfile"
)

// CredsFileName is the name of the batcher credential Serve writes into
// ServeConfig.CredsDir.
const CredsFileName = "batcher.creds"

const credsHeader = `# towerrl batcher credential: the NKey seed of the NATS user that batchers connect as.
# It may fetch tasks, read policies and publish rollouts; nothing else. Keep it secret
# (mode 0600); copy it to the machines that run "batcher --connect URL --creds FILE".
`

// batcherKey returns the public key of the batcher credential in dir, writing a new one
// (mode 0600, atomically) when there is none, so that a resumed learner keeps accepting
// the batchers of its previous run.
func batcherKey(dir string) (pub, path string, err error) {
	path = filepath.Join(dir, CredsFileName)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		kp, err := nkeys.ParseDecoratedUserNKey(b)
		if err != nil {
			return "", "", fmt.Errorf("remote: reading the batcher credential %s: %w (delete it to have a new one written)", path, err)
		}
		pub, err = kp.PublicKey()
		kp.Wipe()
		return pub, path, err
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("remote: reading the batcher credential: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", "", fmt.Errorf("remote: making the batcher credential: %w", err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return "", "", fmt.Errorf("remote: making the batcher credential: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("remote: writing the batcher credential: %w", err)
	}
	data := append([]byte(credsHeader), seed...)
	data = append(data, '\n')
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return "", "", fmt.Errorf("remote: writing the batcher credential: %w", err)
	}
	pub, err = kp.PublicKey()
	return pub, path, err
}

// memoryKey is an NKey user that exists only in this process (the learner's admin identity).
type memoryKey struct {
	kp  nkeys.KeyPair
	pub string
}

func newMemoryKey() (*memoryKey, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("remote: making the learner's NATS identity: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("remote: making the learner's NATS identity: %w", err)
	}
	return &memoryKey{kp: kp, pub: pub}, nil
}

func (k *memoryKey) option() nats.Option {
	return nats.Nkey(k.pub, k.kp.Sign)
}

// credsOption returns the NATS option that authenticates with file: a NATS .creds file
// (user JWT and NKey seed, as nsc writes for an operator-mode cluster) or an NKey seed file
// such as the batcher.creds Serve writes. An empty file name gives no option (the server
// will refuse the connection if it requires authentication).
func credsOption(file string) (nats.Option, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("remote: reading the NATS credential: %w", err)
	}
	defer clear(b)
	if bytes.Contains(b, []byte("BEGIN NATS USER JWT")) {
		return nats.UserCredentials(file), nil
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, fmt.Errorf("remote: %s is neither a NATS .creds file nor an NKey user seed: %w", file, err)
	}
	kp.Wipe()
	opt, err := nats.NkeyOptionFromSeed(file)
	if err != nil {
		return nil, fmt.Errorf("remote: reading the NKey seed in %s: %w", file, err)
	}
	return opt, nil
}

// connErrors records the asynchronous errors of a NATS connection that callers must see:
// the server refusing a publish or subscription for lack of permission.
type connErrors struct {
	mu   sync.Mutex // guards perm
	perm []error    // permission violations, oldest first, at most 16
}

func (e *connErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.perm) == 16 {
		e.perm = e.perm[1:]
	}
	e.perm = append(e.perm, err)
}

// permission returns the latest permission violation whose text names subject, wrapped in
// ErrPermission, or nil.
func (e *connErrors) permission(subject string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.perm) - 1; i >= 0; i-- {
		if strings.Contains(e.perm[i].Error(), subject) {
			return fmt.Errorf("%w: %v", ErrPermission, e.perm[i])
		}
	}
	return nil
}

// authError turns the NATS server's refusal of a connection into ErrUnauthorized with
// advice; other errors are returned as they are.
func authError(url, creds string, err error) error {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		what := "no credential"
		if creds != "" {
			what = fmt.Sprintf("credential %s", creds)
		}
		return fmt.Errorf("%w: %s refused %s (%v): pass the %s the learner wrote into its run directory, or the one your NATS operator issued",
			ErrUnauthorized, url, what, err, CredsFileName)
	}
	return err
}
