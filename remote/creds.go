package remote

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/towerrl/towerrl/internal/atomicfile"
)

// CredsExt ends the name of every batcher credential Serve writes into ServeConfig.CredsDir:
// <id>.creds, one per batcher ID.
const CredsExt = ".creds"

// credsIDPrefix starts the line of a batcher credential that names its batcher ID.
const credsIDPrefix = "# towerrl batcher id: "

const credsHeader = `# towerrl batcher credential: the NKey seed of the NATS user that one batcher connects as.
# It may register, take tasks and credits, read policies and publish rollouts under the batcher
# ID below, and nothing else; no other batcher can use that ID or read its replies. Keep it
# secret (mode 0600); copy it to the machine that runs "batcher --connect URL --creds FILE"
# (the batcher's ID comes from this file).
`

// issueCreds returns the credential of batcher id in dir, <id>.creds, writing a new one
// (mode 0600, atomically) when there is none, so that a resumed learner keeps accepting the
// batchers of its previous run.
func issueCreds(dir, id string) (pub, path string, err error) {
	if err := checkToken(id); err != nil {
		return "", "", fmt.Errorf("remote: batcher id %q: %w", id, err)
	}
	path = filepath.Join(dir, id+CredsExt)
	got, pub, err := readCreds(path)
	switch {
	case err == nil && got != id:
		return "", "", fmt.Errorf("remote: %s is the credential of batcher %q, not %q: rename or delete it", path, got, id)
	case err == nil:
		return pub, path, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", "", fmt.Errorf("remote: making the credential of batcher %s: %w", id, err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return "", "", fmt.Errorf("remote: making the credential of batcher %s: %w", id, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("remote: writing the credential of batcher %s: %w", id, err)
	}
	data := append([]byte(credsHeader+credsIDPrefix+id+"\n"), seed...)
	data = append(data, '\n')
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return "", "", fmt.Errorf("remote: writing the credential of batcher %s: %w", id, err)
	}
	pub, err = kp.PublicKey()
	return pub, path, err
}

// maxCredsBytes bounds a credential file read (a seed file is a few hundred bytes, a NATS
// .creds file with its JWT a few kilobytes).
const maxCredsBytes = 64 << 10

// readCreds reads a batcher credential Serve wrote: the batcher ID it names and its public
// key. A file that names no ID (the one credential all batchers shared before IDs were bound
// to credentials, or a NATS .creds file) is an error that says what to do.
func readCreds(path string) (id, pub string, err error) {
	b, err := readSmall(path)
	if err != nil {
		return "", "", err
	}
	defer clear(b)
	id = credsID(b)
	if id == "" {
		return "", "", fmt.Errorf("remote: %s names no batcher ID: it is not a batcher credential this version writes (each batcher now has its own, <id>%s); delete it", path, CredsExt)
	}
	if err := checkToken(id); err != nil {
		return "", "", fmt.Errorf("remote: %s: batcher id %q: %w", path, id, err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return "", "", fmt.Errorf("remote: reading the batcher credential %s: %w (delete it to have a new one written)", path, err)
	}
	defer kp.Wipe()
	pub, err = kp.PublicKey()
	return id, pub, err
}

// readSmall reads a credential file of at most maxCredsBytes.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("remote: reading the credential: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCredsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("remote: reading the credential %s: %w", path, err)
	}
	if len(b) > maxCredsBytes {
		clear(b)
		return nil, fmt.Errorf("remote: %s is larger than %d KiB: not a credential", path, maxCredsBytes>>10)
	}
	return b, nil
}

// credsID is the batcher ID a credential's text names, "" if none.
func credsID(b []byte) string {
	for line := range bytes.Lines(b) {
		if id, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte(strings.TrimSpace(credsIDPrefix))); ok {
			return string(bytes.TrimSpace(id))
		}
	}
	return ""
}

// CredsID is the batcher ID the credential file names: the ID of a credential Serve wrote,
// "" for a NATS .creds file or a bare NKey seed (whose ID the batcher chooses, and an
// external server's operator binds by permissions).
func CredsID(file string) (string, error) {
	b, err := readSmall(file)
	if err != nil {
		return "", err
	}
	defer clear(b)
	return credsID(b), nil
}

// loadCreds reads every batcher credential in dir (*.creds): those of an earlier learner of
// the run, so that its batchers are accepted again. A file that is not one is an error.
func loadCreds(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote: listing the batcher credentials: %w", err)
	}
	keys := map[string]string{} // public key → batcher ID
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), CredsExt) {
			continue
		}
		id, pub, err := readCreds(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		keys[pub] = id
	}
	return keys, nil
}

// authUser is one identity the embedded server accepts: its name (a batcher ID, or the
// learner) and its permissions (nil: all).
type authUser struct {
	name  string
	perms *server.Permissions
}

// authTable is the embedded server's authentication (server.Options.CustomClientAuthentication):
// NKey users the learner can add while it serves (Server.AddBatcher, Server.LocalClient). A
// client proves it holds the key by signing the server's nonce, as with the server's own
// NKey users; it then gets its user's permissions.
type authTable struct {
	mu    sync.Mutex // guards users
	users map[string]authUser
}

func (a *authTable) add(pub string, u authUser) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.users[pub] = u
}

// Check implements server.Authentication.
func (a *authTable) Check(c server.ClientAuthentication) bool {
	opts := c.GetOpts()
	if opts == nil || opts.Nkey == "" || opts.Sig == "" {
		return false
	}
	a.mu.Lock()
	u, ok := a.users[opts.Nkey]
	a.mu.Unlock()
	nonce := c.GetNonce()
	if !ok || len(nonce) == 0 {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(opts.Sig)
	if err != nil {
		if sig, err = base64.StdEncoding.DecodeString(opts.Sig); err != nil {
			return false
		}
	}
	pk, err := nkeys.FromPublicKey(opts.Nkey)
	if err != nil || pk.Verify(nonce, sig) != nil {
		return false
	}
	c.RegisterUser(&server.User{Username: u.name, Permissions: u.perms})
	return true
}

// batcherUser is the user of batcher id in namespace nm: BatcherPermissions.
func batcherUser(nm names, id string) (authUser, error) {
	pubs, subs, deny, err := BatcherPermissions(nm.ns, id)
	if err != nil {
		return authUser{}, err
	}
	return authUser{name: id, perms: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pubs, Deny: deny},
		Subscribe: &server.SubjectPermission{Allow: subs, Deny: []string{nm.ns + ".rollouts.>"}},
	}}, nil
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
// such as the <id>.creds Serve writes, and the batcher ID the file names ("" if none). An
// empty file name gives no option (the server will refuse the connection if it requires
// authentication).
func credsOption(file string) (opt nats.Option, id string, err error) {
	if file == "" {
		return nil, "", nil
	}
	b, err := readSmall(file)
	if err != nil {
		return nil, "", err
	}
	defer clear(b)
	if bytes.Contains(b, []byte("BEGIN NATS USER JWT")) {
		return nats.UserCredentials(file), "", nil
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, "", fmt.Errorf("remote: %s is neither a NATS .creds file nor an NKey user seed: %w", file, err)
	}
	kp.Wipe()
	opt, err = nats.NkeyOptionFromSeed(file)
	if err != nil {
		return nil, "", fmt.Errorf("remote: reading the NKey seed in %s: %w", file, err)
	}
	return opt, credsID(b), nil
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
		return fmt.Errorf("%w: %s refused %s (%v): pass one of the batcher credentials the learner wrote into its run directory (DIR/creds/batcher-K.creds, one per batcher; a run's batcher.creds of earlier versions is no longer accepted), or the one your NATS operator issued",
			ErrUnauthorized, url, what, err)
	}
	return err
}
