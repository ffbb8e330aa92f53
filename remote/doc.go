// Package remote is the transport between batchers in other processes or machines and the
// learner, on NATS JetStream (DI-engine's comm learner, IMPALA/APPO actors): rollouts flow
// from batchers to the learner through a work-queue stream, policies flow back through an
// object store and a "latest" pointer, and a coordinator in the learner hands out collect
// tasks, watches heartbeats and announces the end of the run.
//
//	batcher ── Client.PublishRollout ──▶ <ns>.rollouts.<id> (work queue) ──▶ Server.Rollouts ─▶ learner ─▶ Delivery.Ack
//	learner ── Server.PublishPolicy ──▶ object store <ns>_policies + KV <ns>_run "policy" ──▶ Client.WatchPolicy
//	batcher ── Client.Register / heartbeats / Client.Task ──▶ coordinator (in the Server)
//	learner ── Server.PublishInfo ──▶ Client.Info;  Server.End ──▶ KV <ns>_run "state" ──▶ Client.Done
//
// # Lifecycle
//
// The learner calls [Serve], which starts a NATS server embedded in the process (one
// binary, nothing to install) on ServeConfig.Addr (127.0.0.1 and a free port by default;
// nothing else listens: no monitoring, cluster or websocket port), or [Connect] for an
// external NATS server or cluster (train --nats URL --nats-creds FILE). Either creates or
// re-opens the stream, the buckets and the learner's durable consumer, and starts the
// coordinator. [Server.Close] stops them; [Server.End] tells the batchers the run is over.
//
// A batcher calls [Dial] with the Server's URL and credential, then [Client.Register]
// (refused, with the learner's reason, when its env or observation shape does not fit),
// [Client.Task] for a collect task, [Client.WatchPolicy] to hot-swap policies, and
// [Client.PublishRollout] for each rollout, until [Client.Done] closes; then
// [Client.Flush] and [Client.Close].
//
// # Authentication
//
// Always on, one identity per batcher. An embedded server knows the learner's NKey user,
// whose key exists only in the learner's memory (it connects in-process), and one NKey user
// per batcher ID, whose seed Serve writes to ServeConfig.CredsDir/<id>.creds (mode 0600,
// atomically) for each of ServeConfig.Batchers, or Server.AddBatcher adds while serving; a
// resumed learner accepts every credential already there. The file names its batcher ID, and
// a batcher that connects with it takes that ID. A batcher's user may, under its own ID only,
// make coordinator requests (<ns>.coord.<id>.<verb>) and publish rollouts
// (<ns>.rollouts.<id>); it may read the run bucket, the policy store and the learn-info
// lines, and receive replies in its own inbox, <ns>.inbox.<id> (nats.CustomInboxPrefix), the
// only one it may subscribe to ([BatcherPermissions]). The coordinator takes a request's
// batcher ID from its subject, whatever the request says, and answers into that batcher's
// inbox only; the learner refuses a rollout chunk whose header names another ID than its
// subject (Stats.RefusedReasons "id"). So a batcher cannot read another's replies (the
// server refuses a subscription to _INBOX.> or to another's inbox), nor register, heartbeat,
// take tasks or credits, leave or publish as another. Consumers it creates that no batcher
// needs, durable or pushing outside the batchers' inboxes, the learner deletes every 2 s. It
// cannot move the policy pointer, store a policy, read rollouts, or create, purge or delete a
// stream; the server refuses with a permissions violation. A client without a credential the
// learner issued is refused at connection ([ErrUnauthorized]). Local batchers (train
// --local-workers) get identities that exist only in the learner's process
// ([Server.LocalClient]). With ServeConfig.TLSCert and TLSKey the server speaks TLS only;
// batchers pass the CA with ClientConfig.CAFile. On an external cluster the operator issues
// the learner's credential and one per batcher ID, granting each BatcherPermissions(ns, id),
// and each batcher is started with its ID (ClientConfig.BatcherID, batcher --id).
//
// # Rollout messages
//
// A rollout is a header (format version, env id, policy version, batcher ID, session, sequence
// number, T, N, observation and action sizes, the list of columns) and named float32, int64
// or float64 columns, little-endian, compressed as a whole (S2 by default, zstd or none) and
// checked by a CRC-32C; see wire.go for the layout. It is split into chunks of at most
// 1 MiB (NATS's default max_payload), each a NATS message carrying the rollout's identity
// and its place, and reassembled by the learner in any order. Decoding never panics and
// never allocates more than the header claims, bounded by [MaxRolloutBytes]; a corrupt or
// truncated message is an error wrapping [ErrCorrupt] (another format version: [ErrFormat])
// and is dropped for good (terminated, counted in Stats.Corrupt).
//
// # Batcher rollouts
//
// [Pack] turns a batcher.Rollout into a RolloutMsg (the columns are listed in rollout.go:
// observations, actions, rewards, flags, log-probabilities, values, versions, episode starts,
// bootstrap observations and values, finished episodes, recurrent states), and
// [RolloutMsg.Unpack] turns it back into a batcher.Rollout, checking every column against the
// header. What a learner may read arrives bit for bit; the rows of FinalObs and FinalValues
// the batcher leaves stale travel as zeros (they are not sent).
//
// # The two ends
//
// [RunBatcher] is a whole remote batcher (batcher --connect URL --creds FILE): dial,
// register, take a task, wait for a policy of at least the task's floor, collect with a local
// batcher.Batcher seeded by [TaskSeed], publish each rollout, hot-swap to each newer policy
// between rollouts, drop a task the coordinator gave away and take another, and return nil
// when the learner ends the run. A hot swap to a version that differs from the one collecting
// only in its weights (the learner's next version) copies the weights into the sessions in
// place (batcher.Batcher.Publish: the first policy of a task is built with its float32
// initializers laid out for it); another graph builds new sessions (batcher.UpdatePolicy).
// [Source] is the learner's end: Next hands out the next rollout unpacked, and the trainer
// acknowledges it (Received.Ack, Source.AckAll) once it is in a tower stack; its Publish
// publishes policies on a goroutine of its own, newest first, so that the trainer does not
// wait on the store. [Watch] follows the learn-info lines without collecting (batcher
// --watch URL).
//
// # Credits
//
// With ServeConfig.Credits the learner paces the batchers (credit.go): a batcher asks for a
// credit before each rollout (Client.Credit; RunBatcher does when its task says Credited),
// and at most Credits rollouts are granted that the learner has not been handed yet. A grant
// names the policy version to collect with at least (the newest published; with OnPolicy,
// for ppo, the one after the rollout whose credit it reuses), so the batchers collect what the
// learner can train instead of rollouts it would drop as too old. The credits of a batcher
// that leaves, is started again or stops heartbeating go back to the pool (a batcher killed
// and not started again holds them until HeartbeatTimeout: with few credits the learner waits
// that long); the pool lives in the learner's memory, and a restarted learner starts a full
// one.
//
// # Delivery guarantees
//
// Publishing: at most ClientConfig.MaxInFlight chunks await the server's confirmation;
// PublishRollout blocks beyond that, so a slow learner slows batchers down instead of
// filling memory. The stream is bounded (ServeConfig.StreamMaxBytes, discard new): when it
// is full, or the server refuses with "too many requests", or a confirmation times out,
// or the connection is down, the chunk is sent again with backoff until it is stored.
// Each chunk carries a message ID (batcher, session, sequence, chunk), so JetStream drops a
// second copy stored within its 2-minute duplicate window. Per batcher, rollouts arrive in
// publish order unless a retry put a later one first.
//
// Consuming: the learner's durable pull consumer takes chunks in stream order over a
// connection of its own; a Delivery is handed out once a rollout is complete and decoded,
// and its chunks are acknowledged only by [Delivery.Ack] or [Server.AckAll], which the
// learner calls once the rollout is in a tower stack (or discarded). Acknowledgements are
// confirmed by the server before Ack returns. An unacknowledged rollout stays in the stream:
// JetStream redelivers it after ServeConfig.AckWait, and a new learner (a restart on the
// same store) gets every unacknowledged rollout at once, since Serve and Connect recreate
// the consumer.
//
// De-duplication: the Server remembers, in memory, which (batcher ID, session, sequence)
// it handed out: a redelivered or republished copy of a rollout the learner holds is
// ignored (acknowledging the original removes it), and a copy of one already acknowledged
// is acknowledged and dropped (Stats.Duplicates). The memory is bounded: per batcher
// session, the newest sequence number delivered and which of the DedupWindow (4096) below it
// were; at most DedupSessions (4096) sessions, least recently seen forgotten first. A
// rollout more than DedupWindow sequence numbers older than its session's newest is taken
// for a duplicate and dropped: it would have had to be stuck for 4096 newer rollouts of the
// same batcher. The session is a random number drawn by Dial, so a restarted batcher with
// the same ID is a new session. The memory dies with the learner: after a restart,
// duplicates are recognised only among rollouts that were never acknowledged, which is
// all a restarted learner can be sent again (an acknowledged rollout is gone from the
// stream).
//
// Partial rollouts: chunks of a rollout whose other chunks do not arrive within
// ServeConfig.ChunkTimeout (a batcher killed while publishing it) are dropped (Stats.Incomplete);
// so are the oldest when more than 4 of one batcher ID, more than ServeConfig.MaxPending in
// all, or chunks of half StreamMaxMsgs wait (Stats.Refused, reason "unfinished").
//
// Holding rollouts against the run: with ServeConfig.Spec every rollout is checked against the
// run's env, T, N, sizes, column types and lengths before anything is decompressed, and its
// values and policy versions once unpacked (see [Spec] and Source.Next); one that does not fit
// is acknowledged, logged with its batcher ID and counted by reason (Stats.Refused). A
// batcher's credential can send anything under its own ID: nothing it sends reaches the
// learner's batch unchecked or costs more memory than a rollout of the run.
//
// # Policies
//
// [Server.PublishPolicy] puts the ONNX bytes into the object store under their version,
// then moves the run bucket's "policy" key to {version, sha256, size, object}, then deletes
// all but the KeepPolicies newest. [Client.WatchPolicy] follows the key, reads the object,
// verifies size and SHA-256 and delivers it; a watcher that falls behind gets the newest
// only, never an older one after a newer.
//
// # Coordinator
//
// Batchers register with their env, observation shape, action space and env count
// (ServeConfig.Admit may refuse them) and heartbeat every HeartbeatInterval. Tasks added
// with [Server.AddTask] go to the first batcher that asks without one; a batcher keeps its
// task until it leaves (Close), or is silent for HeartbeatTimeout, when the task goes to
// the next batcher with Task.Attempt incremented (seeds differ). A batcher presumed dead
// that heartbeats again is told to register again and that its task is lost
// (Assignment.Lost). A batcher ID names one batcher, and only its credential's holder may use
// it: a new session registering under it (the
// batcher started again) drops the previous session, freeing its task and credits, once that
// session has been silent for 1.5 heartbeat intervals and a second (until then the newcomer is told to wait,
// so that no client evicts a live batcher by taking its ID). Registrations are bounded (16 KB,
// free text cut to 256 bytes, 1,024 batchers). Learn-info lines ([Server.PublishInfo]) are
// plain NATS messages, not stored. [Server.End] writes the run bucket's "state" key, which every Client watches:
// Done closes, and Task, PublishRollout and Register return [ErrRunEnded].
//
// # What is persisted where
//
// In the embedded server's store (ServeConfig.StoreDir, under the run directory): the
// rollout stream with its unacknowledged rollouts and the consumer's state, the policy
// object store and the run bucket. In CredsDir: one <id>.creds per batcher. In memory only: the
// de-duplication window, partly received rollouts, the coordinator's batchers, tasks and
// credits (batchers register again, and reclaim their task if it is free, when a learner
// restarts).
// Two learners must not serve one store at once: the caller guarantees it (the run
// directory's lock does, with the store under the run directory).
//
// # Failure behaviour
//
//   - Learner killed: batchers' publishes retry until a learner serves the store again on
//     the same address (their NATS connections reconnect every 250 ms, forever); nothing
//     acknowledged by the stream is lost; unacknowledged rollouts go to the new learner. On
//     reconnection a Client watches the run bucket again at once (the old watch's consumer
//     died with the server), so the resumed learner's first policy reaches it in
//     milliseconds, and sends again at once any coordinator request (a credit) the dead
//     learner held. A resumed learner refuses the rollouts left in the stream by policy
//     versions it never had (see Source.Next).
//   - Batcher killed: its in-flight chunks are lost or, if stored, delivered; a partly
//     stored rollout is dropped after ChunkTimeout; its task is reassigned after
//     HeartbeatTimeout.
//   - Learner slow: the stream fills to StreamMaxBytes, then batchers block in
//     PublishRollout.
//   - A permanent publish refusal (a chunk too large for an external server, a missing
//     permission) is returned by the next PublishRollout and Flush.
//
// # Threading and ownership
//
// Server and Client methods are safe for concurrent use. Each owns the goroutines it
// starts (the Server: the Rollouts loop and the heartbeat sweep; the Client: the publish
// acknowledger, the run-state watcher, heartbeats, policy and info watchers; the Source:
// its policy publisher) and Close stops and waits for them. One Rollouts loop runs at a time. RunBatcher runs on its
// caller's goroutine and starts, per task, one goroutine that publishes (so that the next
// rollout is collected meanwhile); it stops and waits for it before it returns. PublishRollout copies the
// rollout into its encoding before it returns, so the caller may reuse its buffers.
// A Delivery's Rollout belongs to the learner.
package remote
