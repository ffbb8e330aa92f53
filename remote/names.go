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
func (n names) info() string                    { return n.ns + ".info" }

// coord is the subject of a coordinator request of batcher id; coordAll matches every
// batcher's requests of one verb. The batcher ID is a token of the subject, not only a field
// of the request, so that a credential allowed to publish under its own ID alone (see
// BatcherPermissions) cannot act as another batcher: the coordinator takes the ID from the
// subject (coordID).
func (n names) coord(id, verb string) string { return n.ns + ".coord." + id + "." + verb }
func (n names) coordAll(verb string) string  { return n.ns + ".coord.*." + verb }

// coordID is the batcher ID of a coordinator request's subject, "" if it is not one.
func (n names) coordID(subject, verb string) string {
	id, ok := strings.CutPrefix(subject, n.ns+".coord.")
	if !ok {
		return ""
	}
	if id, ok = strings.CutSuffix(id, "."+verb); !ok || checkToken(id) != nil {
		return ""
	}
	return id
}

// inbox is the reply subject prefix of batcher id (nats.CustomInboxPrefix): its coordinator
// replies, JetStream API replies and policy deliveries come under it, and its credential may
// subscribe there alone, so no batcher reads another's replies. inboxes prefixes them all.
func (n names) inbox(id string) string { return n.inboxes() + id }
func (n names) inboxes() string        { return n.ns + ".inbox." }

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

// BatcherPermissions lists the subjects the credential of batcher id may publish to and
// subscribe to in namespace ns (DefaultNamespace when empty), and those it is explicitly
// denied. Serve gives each batcher credential exactly these; for an external NATS, an
// operator grants them to each batcher's user (one user per batcher ID). They allow the
// coordinator requests and rollouts of that ID only (<ns>.coord.<id>.*, <ns>.rollouts.<id>),
// reading policies (the run bucket's KV watch and the policy object store's reads: stream
// info, direct and message gets, ordered consumers and their flow control) and the
// learn-info lines. Replies come to the batcher's own inbox, <ns>.inbox.<id>.>, the only
// one it may subscribe to: no batcher reads another's replies or acts under another's ID.
// Nothing else: in particular no KV or object store put ($KV.>, $O.>) and no stream create,
// update, purge or delete.
func BatcherPermissions(ns, id string) (publish, subscribe, deny []string, err error) {
	n, err := newNames(ns)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkToken(id); err != nil {
		return nil, nil, nil, fmt.Errorf("remote: batcher id %q: %w", id, err)
	}
	publish = []string{
		n.rolloutSubject(id),
		n.coord(id, "*"),
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
	subscribe = []string{n.inbox(id) + ".>", n.info()}
	deny = []string{
		"$KV.>", "$O.>",
		"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
		"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>",
		"$JS.API.CONSUMER.CREATE." + n.rolloutStream() + ".>", "$JS.API.CONSUMER.DELETE." + n.rolloutStream() + ".>",
	}
	return publish, subscribe, deny, nil
}
