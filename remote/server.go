package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ServeConfig configures the learner's side. The zero value is usable with Serve once
// StoreDir is set.
type ServeConfig struct {
	// Addr is where the embedded NATS server listens for batchers, host:port. Default
	// "127.0.0.1:0": loopback, a free port (Server.URL tells which). Nothing else listens:
	// no monitoring, cluster, leaf-node or websocket port.
	Addr string
	// StoreDir holds the embedded server's JetStream store (rollouts not yet acknowledged,
	// policies, run state); put it under the run directory so that a resumed run re-opens
	// it. Required by Serve; must be empty for Connect.
	StoreDir string
	// CredsDir holds the batchers' credentials, one per batcher ID: <id>.creds (mode 0600),
	// written for each of Batchers that has none, and every one already there (an earlier
	// learner's) accepted again. Default StoreDir. Serve only.
	CredsDir string
	// Batchers are the IDs of the remote batchers Serve writes credentials for (more can
	// be added while it serves: Server.AddBatcher). A credential lets its holder act as its
	// batcher ID alone (BatcherPermissions). Serve only.
	Batchers []string
	// TLSCert and TLSKey are PEM files; with both set the server speaks only TLS and
	// batchers need the certificate's CA (ClientConfig.CAFile) unless it is a public one.
	// Serve only.
	TLSCert, TLSKey string
	// CAFile is a PEM CA bundle for Connect to verify an external server's TLS certificate.
	CAFile string

	// Namespace prefixes every subject, stream and bucket (default "towerrl"): several
	// runs can share one external NATS under different namespaces.
	Namespace string
	// Replicas of the streams and buckets Connect creates on an external cluster (default 1).
	Replicas int

	// KeepPolicies is how many published policies the object store keeps (default 3).
	KeepPolicies int

	// StreamMaxBytes bounds the rollouts stored and not yet acknowledged (default 1 GiB).
	// A full stream refuses publishes (discard new): batchers wait and retry.
	StreamMaxBytes int64
	// StreamMaxMsgs, when > 0, bounds the messages (rollout chunks) stored and not yet
	// acknowledged too: batchers that collect faster than the learner trains then wait and
	// retry instead of filling StreamMaxBytes with rollouts the learner would drop as too
	// old. Keep it well above the chunks of one rollout times the batchers. Default 0: no
	// bound but StreamMaxBytes.
	StreamMaxMsgs int64
	// AckWait is how long a rollout handed to the learner may stay unacknowledged before
	// JetStream redelivers it (default 60 s). A redelivered copy of a rollout already
	// handed over is never handed over again.
	AckWait time.Duration
	// MaxAckPending bounds the rollout chunks handed out and not yet acknowledged, those
	// of partly received rollouts included (default 1024).
	MaxAckPending int
	// PullBytes bounds the bytes of chunks buffered by the learner's pull (default 32 MiB).
	PullBytes int
	// DedupWindow is how many sequence numbers below a batcher session's newest delivered
	// rollout are tracked exactly (default 4096); DedupSessions how many batcher sessions
	// are remembered (default 4096, least recently seen forgotten first). See the package
	// documentation.
	DedupWindow, DedupSessions int
	// ChunkTimeout is how long a rollout may wait for its missing chunks (a batcher died
	// while publishing it) before its chunks are dropped (default 2 min).
	ChunkTimeout time.Duration

	// Credits, when > 0, is flow control: batchers collect a rollout only with a credit
	// (Client.Credit; RunBatcher asks), and at most Credits rollouts are granted that the
	// learner has not been handed yet, so that batchers collect what the learner can train
	// instead of rollouts it would drop as too old. See credit.go. Default 0: batchers
	// collect freely (StreamMaxBytes and StreamMaxMsgs still bound what is stored).
	Credits int
	// OnPolicy, with Credits, is for a learner that trains only rollouts of its newest
	// policy version and then publishes the next (ppo): the credit freed by a rollout of
	// the newest version is granted for the next version, so that the batcher waits for it
	// instead of collecting a rollout the learner would drop.
	OnPolicy bool

	// CreditLease, with Credits, is how long a batcher may hold a credit while every credit
	// is granted, another batcher waits for one and no rollout comes (default 30 s, or 4
	// times the longest a credit took to be used, if longer): then its task and credits are
	// taken back, as from a batcher that stopped heartbeating, and its ID is served last.
	CreditLease time.Duration

	// HeartbeatInterval is how often batchers heartbeat (default 2 s); a batcher silent
	// for HeartbeatTimeout (default 10 s) is presumed dead and its task reassigned.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// Admit decides whether a registering batcher may join (nil admits all); its error is
	// returned to the batcher as the reason, so name what does not fit (both shapes). It is
	// called from one goroutine at a time.
	Admit func(Registration) error

	// Spec, when set, is what the learner trains on: every rollout is held against it
	// before it is decompressed and again once unpacked, and one that does not fit is
	// dropped, counted and logged (see Spec). Nil: rollouts are only checked against their
	// own headers.
	Spec *Spec
	// MaxPending bounds the rollouts whose chunks are arriving (default 16, and at most 4 per
	// batcher ID): past it the oldest waiting is dropped (Stats.Incomplete), so unfinished
	// rollouts cannot hold the stream's StreamMaxMsgs.
	MaxPending int

	// Logger receives the server's warnings and errors and this package's notes
	// (default: none).
	Logger *zap.Logger
}

func (c *ServeConfig) defaults() {
	if c.CredsDir == "" {
		c.CredsDir = c.StoreDir
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.KeepPolicies == 0 {
		c.KeepPolicies = 3
	}
	if c.StreamMaxBytes == 0 {
		c.StreamMaxBytes = 1 << 30
	}
	if c.AckWait == 0 {
		c.AckWait = time.Minute
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = 1024
	}
	if c.PullBytes == 0 {
		c.PullBytes = 32 << 20
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 4096
	}
	if c.DedupSessions == 0 {
		c.DedupSessions = 4096
	}
	if c.ChunkTimeout == 0 {
		c.ChunkTimeout = 2 * time.Minute
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 2 * time.Second
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = 5 * c.HeartbeatInterval
	}
	if c.CreditLease == 0 {
		c.CreditLease = 30 * time.Second
	}
	if c.MaxPending == 0 {
		c.MaxPending = 16
		if c.StreamMaxMsgs > 0 {
			c.MaxPending = int(min(16, max(1, c.StreamMaxMsgs/4)))
		}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// streamMaxMsgs is JetStream's MaxMsgs for ServeConfig.StreamMaxMsgs (-1: no bound).
func streamMaxMsgs(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

func (c *ServeConfig) validate() error {
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"Replicas", c.Replicas < 1},
		{"KeepPolicies", c.KeepPolicies < 1},
		{"StreamMaxBytes", c.StreamMaxBytes < MaxMessageBytes},
		{"StreamMaxMsgs", c.StreamMaxMsgs < 0},
		{"AckWait", c.AckWait < 0},
		{"MaxAckPending", c.MaxAckPending < 1},
		{"PullBytes", c.PullBytes < MaxMessageBytes},
		{"DedupWindow", c.DedupWindow < 1},
		{"DedupSessions", c.DedupSessions < 1},
		{"ChunkTimeout", c.ChunkTimeout < 0},
		{"HeartbeatInterval", c.HeartbeatInterval < 0},
		{"HeartbeatTimeout", c.HeartbeatTimeout <= c.HeartbeatInterval},
		{"Credits", c.Credits < 0},
		{"MaxPending", c.MaxPending < 1},
		{"CreditLease", c.CreditLease < 0},
	} {
		if f.bad {
			return fmt.Errorf("remote: ServeConfig.%s is out of range (StreamMaxBytes and PullBytes ≥ 1 MiB, HeartbeatTimeout > HeartbeatInterval, counts ≥ 1, durations ≥ 0)", f.name)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("remote: ServeConfig.TLSCert and TLSKey go together: set both or neither")
	}
	if c.Spec != nil {
		if err := c.Spec.validate(); err != nil {
			return err
		}
	}
	return nil
}

// Server is the learner's side: it owns the NATS connection (and the embedded server, if
// Serve started one), the rollout stream and its consumer, the policy buckets and the
// coordinator. Its methods are safe for concurrent use.
type Server struct {
	cfg   ServeConfig
	names names
	log   *zap.Logger

	ns       *server.Server // embedded server; nil after Connect
	url      string         // what batchers dial
	auth     *authTable     // the embedded server's users; nil after Connect
	credsMu  sync.Mutex     // serialises AddBatcher: one file, one key per batcher ID
	credsDir string         // where the batchers' credentials are; "" after Connect
	ownCreds string         // the learner's credential file, after Connect (its local batchers use it)

	nc     *nats.Conn // control: buckets, coordinator, acknowledgements
	pullNC *nats.Conn // rollout data: the pull consumer, alone, so acks do not queue behind megabytes
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
	obj    jetstream.ObjectStore
	kv     jetstream.KeyValue
	codec  *codec
	coord  *coordinator
	subs   []*nats.Subscription

	pubMu  sync.Mutex // serialises PublishPolicy (put, pointer move, prune); guards stored and listed
	stored []string   // the policies this Server stored, oldest first, not yet pruned
	listed bool       // the store was listed and pruned once (policies of earlier learners)

	mu        sync.Mutex // guards the fields below
	consuming bool       // a Rollouts loop runs
	held      map[rolloutKey]*Delivery
	dedup     *dedup
	stats     Stats

	versMu sync.Mutex // guards vers
	vers   versions   // the policy versions published, for the version window (Source.Next)

	// The Rollouts loop's activity, for the credit lease: when it last took a chunk (Unix
	// nanoseconds) and whether it is handing a rollout to the learner now.
	lastChunk atomic.Int64
	handing   atomic.Bool

	quit      chan struct{} // closed by Close
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Serve starts an embedded NATS server with JetStream, authentication always on: an admin
// identity that exists only in this process (the learner connects in-process) and one
// batcher identity per credential in CredsDir (ServeConfig.CredsDir; Server.AddBatcher adds
// more). It then creates or
// re-opens the rollout stream, the policy buckets and the coordinator. Close stops it all.
func Serve(ctx context.Context, cfg ServeConfig) (*Server, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.StoreDir == "" {
		return nil, errors.New("remote: ServeConfig.StoreDir is empty: name a folder under the run directory for the JetStream store")
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	host, portStr, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("remote: ServeConfig.Addr %q: %w (want host:port, e.g. 127.0.0.1:4222)", cfg.Addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("remote: ServeConfig.Addr %q: port %q is not in [0, 65535]", cfg.Addr, portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	nm, err := newNames(cfg.Namespace)
	if err != nil {
		return nil, err
	}
	admin, err := newMemoryKey()
	if err != nil {
		return nil, err
	}
	defer admin.kp.Wipe()
	auth := &authTable{users: map[string]authUser{admin.pub: {name: "learner"}}}
	known, err := loadCreds(cfg.CredsDir)
	if err != nil {
		return nil, err
	}
	for pub, id := range known {
		u, err := batcherUser(nm, id)
		if err != nil {
			return nil, err
		}
		auth.add(pub, u)
	}
	for _, id := range cfg.Batchers {
		if err := addBatcher(auth, nm, cfg.CredsDir, id); err != nil {
			return nil, err
		}
	}

	opts := &server.Options{
		ServerName:                 "towerrl-learner",
		Host:                       host,
		Port:                       port,
		JetStream:                  true,
		StoreDir:                   cfg.StoreDir,
		MaxPayload:                 MaxMessageBytes,
		NoSigs:                     true,
		DisableJetStreamBanner:     true,
		CustomClientAuthentication: auth,
		AlwaysEnableNonce:          true, // clients sign it with their NKey (authTable.Check)
	}
	scheme := "nats"
	if cfg.TLSCert != "" {
		opts.TLSConfig, err = server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey})
		if err != nil {
			return nil, fmt.Errorf("remote: loading the TLS certificate %s and key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		opts.TLS, opts.TLSTimeout = true, 5
		scheme = "tls"
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("remote: configuring the embedded NATS server: %w", err)
	}
	lg := &natsLogger{l: cfg.Logger.Named("nats")}
	ns.SetLogger(lg, false, false)
	ns.Start()
	if !waitReady(ns, lg, 30*time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("remote: the embedded NATS server did not start on %s with its store in %s: %s",
			cfg.Addr, cfg.StoreDir, lg.fatal())
	}
	addr := ns.Addr().(*net.TCPAddr)
	var conns [2]*nats.Conn
	for i, name := range []string{"towerrl-learner", "towerrl-learner-rollouts"} {
		conns[i], err = nats.Connect("", nats.InProcessServer(ns), admin.option(), nats.Name(name), nats.MaxReconnects(-1),
			nats.CustomInboxPrefix(learnerInbox))
		if err != nil {
			if conns[0] != nil {
				conns[0].Close()
			}
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("remote: connecting the learner to its embedded NATS server: %w", err)
		}
	}
	s := newServer(cfg, nm, conns[0], conns[1])
	s.ns, s.auth, s.credsDir = ns, auth, cfg.CredsDir
	s.url = fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(addr.Port)))
	if err := s.setup(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	s.log.Info("remote: serving batchers", zap.String("url", s.url), zap.String("store", cfg.StoreDir),
		zap.String("creds", cfg.CredsDir), zap.Strings("batchers", cfg.Batchers))
	return s, nil
}

// Connect is Serve for an external NATS server or cluster with JetStream (train --nats URL
// --nats-creds FILE): nothing is embedded and no credential is written; the batchers'
// credentials, one user per batcher ID with BatcherPermissions for it, come from the
// cluster's operator. credsFile authenticates the learner (a .creds or NKey seed file; ""
// for none); its user needs JetStream rights on the namespace's stream and buckets and its
// replies come to _INBOX_learner.>. Addr, StoreDir, CredsDir, Batchers, TLSCert and TLSKey
// must be empty.
func Connect(ctx context.Context, url, credsFile string, cfg ServeConfig) (*Server, error) {
	for _, f := range []struct{ name, v string }{
		{"Addr", cfg.Addr}, {"StoreDir", cfg.StoreDir}, {"CredsDir", cfg.CredsDir}, {"TLSCert", cfg.TLSCert}, {"TLSKey", cfg.TLSKey},
	} {
		if f.v != "" {
			return nil, fmt.Errorf("remote: ServeConfig.%s is set for an external NATS server, which owns it: leave it empty with Connect", f.name)
		}
	}
	if len(cfg.Batchers) > 0 {
		return nil, errors.New("remote: ServeConfig.Batchers is set for an external NATS server, whose operator issues the batchers' credentials: leave it empty with Connect")
	}
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	nm, err := newNames(cfg.Namespace)
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name("towerrl-learner"), nats.MaxReconnects(-1), nats.CustomInboxPrefix(learnerInbox)}
	if o, _, err := credsOption(credsFile); err != nil {
		return nil, err
	} else if o != nil {
		opts = append(opts, o)
	}
	if cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.CAFile))
	}
	ce := &connErrors{}
	opts = append(opts, nats.ErrorHandler(ce.handler))
	nc, err := connectRetry(ctx, url, credsFile, opts)
	if err != nil {
		return nil, err
	}
	pullNC, err := connectRetry(ctx, url, credsFile, append(opts, nats.Name("towerrl-learner-rollouts")))
	if err != nil {
		nc.Close()
		return nil, err
	}
	s := newServer(cfg, nm, nc, pullNC)
	s.url, s.ownCreds = nc.ConnectedUrlRedacted(), credsFile
	if err := s.setup(ctx); err != nil {
		if p := ce.permission("$JS.API"); p != nil {
			err = fmt.Errorf("%w (the learner's credential needs JetStream admin rights in its account)", p)
		}
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// learnerInbox prefixes the learner's reply subjects (its pulled rollouts among them), out
// of reach of the batchers' _INBOX.> subscription permission.
const learnerInbox = "_INBOX_learner"

func newServer(cfg ServeConfig, nm names, nc, pullNC *nats.Conn) *Server {
	return &Server{
		cfg: cfg, names: nm, log: cfg.Logger, nc: nc, pullNC: pullNC, codec: newCodec(0),
		held: make(map[rolloutKey]*Delivery), dedup: newDedup(cfg.DedupWindow, cfg.DedupSessions),
		stats: Stats{PerBatcher: map[string]int64{}, RefusedReasons: map[string]int64{}, RefusedBatchers: map[string]int64{}},
		quit:  make(chan struct{}),
	}
}

// setup creates or re-opens the stream, its consumer, the buckets and the coordinator.
func (s *Server) setup(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return fmt.Errorf("remote: JetStream: %w", err)
	}
	s.js = js
	s.stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        s.names.rolloutStream(),
		Description: "towerrl rollouts from batchers to the learner (work queue)",
		Subjects:    []string{s.names.rolloutSubjects()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardNew,
		MaxBytes:    s.cfg.StreamMaxBytes,
		MaxMsgs:     streamMaxMsgs(s.cfg.StreamMaxMsgs),
		MaxMsgSize:  MaxMessageBytes,
		Duplicates:  2 * time.Minute,
		Replicas:    s.cfg.Replicas,
	})
	if err != nil && strings.Contains(err.Error(), "insufficient storage") {
		where := "the NATS server's JetStream store (raise its max_file_store, or lower StreamMaxBytes)"
		if s.cfg.StoreDir != "" {
			// The embedded server grants JetStream 75% of the free space of its store's
			// filesystem, and the stream reserves StreamMaxBytes of it.
			where = fmt.Sprintf("%s: the embedded server grants 75%% of the free space of its filesystem, so free %.1f GiB there",
				s.cfg.StoreDir, float64(s.cfg.StreamMaxBytes)*4/3/(1<<30))
		}
		return fmt.Errorf("remote: creating the rollout stream %s: %w: the stream reserves %.1f GiB (StreamMaxBytes) in %s",
			s.names.rolloutStream(), err, float64(s.cfg.StreamMaxBytes)/(1<<30), where)
	}
	if err != nil {
		return fmt.Errorf("remote: creating the rollout stream %s: %w", s.names.rolloutStream(), err)
	}
	// A new learner takes over from any earlier one: recreating the durable consumer
	// makes the rollouts the earlier learner had been handed and never acknowledged
	// deliverable at once rather than after its AckWait. (A work queue keeps every
	// unacknowledged message; acknowledged ones are gone.)
	if err := s.stream.DeleteConsumer(ctx, learnerConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("remote: replacing the previous learner's consumer on %s: %w", s.names.rolloutStream(), err)
	}
	_, err = s.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       learnerConsumer,
		Description:   "the learner",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: s.cfg.MaxAckPending,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Replicas:      s.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("remote: creating the learner's consumer on %s: %w", s.names.rolloutStream(), err)
	}
	jsPull, err := jetstream.New(s.pullNC)
	if err != nil {
		return fmt.Errorf("remote: JetStream: %w", err)
	}
	if s.cons, err = jsPull.Consumer(ctx, s.names.rolloutStream(), learnerConsumer); err != nil {
		return fmt.Errorf("remote: binding the learner's consumer on %s: %w", s.names.rolloutStream(), err)
	}
	s.obj, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      s.names.policyBucket(),
		Description: "towerrl policies (ONNX)",
		Storage:     jetstream.FileStorage,
		Replicas:    s.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("remote: creating the policy object store %s: %w", s.names.policyBucket(), err)
	}
	s.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      s.names.runBucket(),
		Description: "towerrl run state and latest-policy pointer",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    s.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("remote: creating the run bucket %s: %w", s.names.runBucket(), err)
	}
	if _, err := s.kv.PutString(ctx, keyState, stateRunning); err != nil {
		return fmt.Errorf("remote: marking the run as running: %w", err)
	}
	s.wg.Add(1)
	go s.sweepConsumers()
	return s.startCoordinator()
}

// consumerIdle is how long the Rollouts loop has waited for a chunk with none coming (0
// while it hands a rollout to the learner, or when no loop runs).
func (s *Server) consumerIdle(now time.Time) time.Duration {
	s.mu.Lock()
	consuming := s.consuming
	s.mu.Unlock()
	last := s.lastChunk.Load()
	if !consuming || s.handing.Load() || last == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, last))
}

// URL is the address batchers dial: nats://host:port, or tls://host:port with TLS. With a
// wildcard listen address (0.0.0.0) replace the host by one the batchers can reach.
func (s *Server) URL() string { return s.url }

// CredsDir is the folder of the batchers' credentials Serve wrote or reused, <id>.creds
// ("" after Connect).
func (s *Server) CredsDir() string { return s.credsDir }

// AddBatcher issues the credential of batcher id, CredsDir/<id>.creds (or reuses the one
// there), and accepts it from now on; it returns the file's path. Serve only: an external
// server's operator issues its batchers' credentials.
func (s *Server) AddBatcher(id string) (string, error) {
	if s.auth == nil {
		return "", errors.New("remote: AddBatcher: the batchers' credentials of an external NATS server come from its operator (one user per batcher ID, with remote.BatcherPermissions)")
	}
	s.credsMu.Lock()
	defer s.credsMu.Unlock()
	if err := addBatcher(s.auth, s.names, s.credsDir, id); err != nil {
		return "", err
	}
	return filepath.Join(s.credsDir, id+CredsExt), nil
}

func addBatcher(auth *authTable, nm names, dir, id string) error {
	pub, _, err := issueCreds(dir, id)
	if err != nil {
		return err
	}
	u, err := batcherUser(nm, id)
	if err != nil {
		return err
	}
	auth.add(pub, u)
	return nil
}

// LocalClient is the ClientConfig of a batcher the learner runs in its own process (train
// --local-workers) as batcher id: with Serve, an identity that exists only in this process,
// allowed what BatcherPermissions allows id; after Connect, the learner's own credential
// (its operator must then grant that user the batcher's permissions too).
func (s *Server) LocalClient(id string) (ClientConfig, error) {
	cfg := ClientConfig{BatcherID: id, Namespace: s.names.ns}
	if s.auth == nil {
		cfg.Creds = s.ownCreds
		return cfg, nil
	}
	k, err := newMemoryKey()
	if err != nil {
		return ClientConfig{}, err
	}
	u, err := batcherUser(s.names, id)
	if err != nil {
		return ClientConfig{}, err
	}
	s.auth.add(k.pub, u)
	cfg.key = k
	return cfg, nil
}

// Close stops the Rollouts loop, the coordinator and, for Serve, the embedded server. It
// waits for them and is idempotent. Unacknowledged rollouts stay in the store and are
// redelivered to the next learner that serves it; End (not Close) tells batchers to exit.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		s.wg.Wait()
		var errs []error
		for _, sub := range s.subs {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				errs = append(errs, fmt.Errorf("remote: unsubscribing %s: %w", sub.Subject, err))
			}
		}
		for _, nc := range []*nats.Conn{s.pullNC, s.nc} {
			if err := nc.Flush(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				errs = append(errs, fmt.Errorf("remote: flushing the learner's connection: %w", err))
			}
			nc.Close()
		}
		if s.ns != nil {
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
		}
		s.codec.close()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// natsLogger sends the embedded server's log to zap: notices and below at debug level,
// warnings and errors as such; it keeps the last fatal message, which explains a failed
// start (a port in use, an unwritable store).
type natsLogger struct {
	l         *zap.Logger
	mu        sync.Mutex // guards lastFatal
	lastFatal string
}

func (n *natsLogger) Noticef(format string, v ...any) { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Warnf(format string, v ...any)   { n.l.Warn(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Errorf(format string, v ...any)  { n.l.Error(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Debugf(format string, v ...any)  { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Tracef(format string, v ...any)  {}
func (n *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	n.l.Error(msg)
	n.mu.Lock()
	n.lastFatal = msg
	n.mu.Unlock()
}

// waitReady waits until ns accepts connections, it reports a fatal error (a port in use),
// or limit passes.
func waitReady(ns *server.Server, lg *natsLogger, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ns.ReadyForConnections(20 * time.Millisecond) {
			return true
		}
		lg.mu.Lock()
		failed := lg.lastFatal != ""
		lg.mu.Unlock()
		if failed {
			return false
		}
	}
	return false
}

func (n *natsLogger) fatal() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lastFatal == "" {
		return "no reason given (see the log)"
	}
	return n.lastFatal
}

// tlsErr reports a certificate the client does not trust: retrying cannot help.
func tlsErr(err error) bool {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &verify)
}

// connectRetry connects to url, retrying with backoff until ctx ends; a refused credential
// is final.
func connectRetry(ctx context.Context, url, creds string, opts []nats.Option) (*nats.Conn, error) {
	wait := 100 * time.Millisecond
	for {
		nc, err := nats.Connect(url, append(opts, nats.Timeout(5*time.Second))...)
		if err == nil {
			return nc, nil
		}
		if err := authError(url, creds, err); errors.Is(err, ErrUnauthorized) {
			return nil, err
		}
		if tlsErr(err) {
			return nil, fmt.Errorf("remote: %s: the server's TLS certificate is not trusted: %w (pass its CA with --ca FILE / CAFile)", url, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("remote: connecting to %s: %w (last error: %v)", url, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
