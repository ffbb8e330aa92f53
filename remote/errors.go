package remote

import "errors"

var (
	// ErrName is returned for a namespace or batcher ID that is not a valid NATS token.
	ErrName = errors.New("remote: invalid name (use letters, digits, '-' and '_')")
	// ErrCorrupt is returned for a rollout message or chunk that is truncated, fails its
	// checksum or does not decode: the message is dropped, never retried.
	ErrCorrupt = errors.New("remote: corrupt rollout message")
	// ErrFormat is returned for a rollout message of a format version this build does not
	// read: upgrade the older of learner and batcher.
	ErrFormat = errors.New("remote: unsupported rollout message format")
	// ErrColumn is returned when a rollout lacks a column or holds it with another type.
	ErrColumn = errors.New("remote: rollout column")
	// ErrTooLarge is returned for a rollout whose uncompressed columns exceed MaxRolloutBytes.
	ErrTooLarge = errors.New("remote: rollout too large")
	// ErrClosed is returned by calls on a closed Client or Server.
	ErrClosed = errors.New("remote: closed")
	// ErrRunEnded is returned by a Client's calls once the learner announced the end of
	// the run: the batcher should flush and exit cleanly.
	ErrRunEnded = errors.New("remote: the learner ended the run")
	// ErrRefused is returned by Client.Register when the coordinator does not admit the
	// batcher; the error's text carries the coordinator's reason.
	ErrRefused = errors.New("remote: registration refused by the learner")
	// ErrUnauthorized is returned by Dial and Connect when the NATS server refuses the
	// credential (missing, wrong, or from another run).
	ErrUnauthorized = errors.New("remote: the NATS server refused the credential")
	// ErrUnreachable is returned by RunBatcher when nothing answered at the learner's
	// address within BatcherConfig.ConnectTimeout.
	ErrUnreachable = errors.New("remote: the learner did not answer")
	// ErrPermission is returned when the NATS server refuses an operation the credential
	// is not allowed (a batcher credential publishing a policy or deleting a stream).
	ErrPermission = errors.New("remote: permission denied by the NATS server")
)
