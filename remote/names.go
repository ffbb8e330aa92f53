package remote

import (
	"fmt"
	"strings"
)

// DefaultNamespace prefixes every subject, stream and bucket of a run when
// ServeConfig.Namespace and ClientConfig.Namespace are empty.
const DefaultNamespace = "towerrl"

// maxTokenLen bounds a namespace and a batcher ID, so that a chunk's NATS header (its
// Nats-Msg-Id names the batcher) stays small next to the 1 MiB payload limit.
const maxTokenLen = 64

// names derives every subject, stream and bucket of one namespace.
type names struct {
	ns string
}

func newNames(ns string) (names, error) {
	if ns == "" {
		ns = DefaultNamespace
	}
	if err := checkToken(ns); err != nil {
		return names{}, fmt.Errorf("remote: namespace %q: %w", ns, err)
	}
	return names{ns: ns}, nil
}

// checkToken accepts names usable both as a NATS subject token and in a stream name:
// letters, digits, '-' and '_', 1 to 64 bytes.
func checkToken(s string) error {
	if s == "" || len(s) > maxTokenLen {
		return fmt.Errorf("%w: want 1 to %d bytes, have %d", ErrName, maxTokenLen, len(s))
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%w: %q is not a letter, digit, '-' or '_'", ErrName, r)
		}
	}
	return nil
}

// SanitizeID turns any string (a host name, a path) into a valid batcher ID: characters
// other than letters, digits, '-' and '_' become '_', and it is cut to 64 bytes. An empty
// string gives "batcher".
func SanitizeID(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= maxTokenLen {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "batcher"
	}
	return b.String()
}

func (n names) rolloutStream() string           { return n.ns + "_rollouts" }
func (n names) rolloutSubjects() string         { return n.ns + ".rollouts.*" }
func (n names) rolloutSubject(id string) string { return n.ns + ".rollouts." + id }
func (n names) policyBucket() string            { return n.ns + "_policies" } // object store
func (n names) runBucket() string               { return n.ns + "_run" }      // KV: policy pointer, run state
func (n names) coord(verb string) string        { return n.ns + ".coord." + verb }
func (n names) info() string                    { return n.ns + ".info" }

// learnerConsumer is the durable consumer the learner pulls rollouts with.
const learnerConsumer = "learner"

// Keys of the run bucket.
const (
	keyPolicy = "policy" // JSON policyPointer
	keyState  = "state"  // "running" or "ended"
)

// Coordinator verbs (subjects <ns>.coord.<verb>).
const (
	verbRegister  = "register"
	verbHeartbeat = "heartbeat"
	verbTask      = "task"
	verbLeave     = "leave"
	verbCredit    = "credit"
)

// BatcherPermissions lists the subjects a batcher credential may publish to and subscribe
// to in namespace ns (DefaultNamespace when empty), and those it is explicitly denied. Serve
// gives its batcher credential exactly these; for an external NATS, an operator grants them
// to the batchers' user. They allow fetching tasks (coordinator requests), reading policies
// (the run bucket's KV watch and the policy object store's reads: stream info, direct and
// message gets, ordered consumers and their flow control) and publishing rollouts. Nothing
// else: in particular no KV or object store put ($KV.>, $O.>) and no stream create, update,
// purge or delete. Replies come to _INBOX.>.
func BatcherPermissions(ns string) (publish, subscribe, deny []string, err error) {
	n, err := newNames(ns)
	if err != nil {
		return nil, nil, nil, err
	}
	publish = []string{
		n.rolloutSubjects(),
		n.ns + ".coord.*",
		"$JS.FC.>", // flow-control replies of the ordered consumers reading policies
	}
	for _, stream := range []string{"KV_" + n.runBucket(), "OBJ_" + n.policyBucket()} {
		publish = append(publish,
			"$JS.API.STREAM.INFO."+stream,
			"$JS.API.STREAM.MSG.GET."+stream,
			"$JS.API.DIRECT.GET."+stream,
			"$JS.API.DIRECT.GET."+stream+".>",
			"$JS.API.CONSUMER.CREATE."+stream,
			"$JS.API.CONSUMER.CREATE."+stream+".>",
			"$JS.API.CONSUMER.DELETE."+stream+".>",
			"$JS.API.CONSUMER.INFO."+stream+".>",
		)
	}
	subscribe = []string{"_INBOX.>", n.info()}
	deny = []string{
		"$KV.>", "$O.>",
		"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
		"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>",
		"$JS.API.CONSUMER.CREATE." + n.rolloutStream() + ".>", "$JS.API.CONSUMER.DELETE." + n.rolloutStream() + ".>",
	}
	return publish, subscribe, deny, nil
}
