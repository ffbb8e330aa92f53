package policy

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// Head is how a run binds its policy's head: the spec the env's spaces give (with the head
// the user named), and what the user named of a foreign policy (Kind, Names; zero:
// recognised).
type Head struct {
	Spec  head.Spec
	Kind  head.Kind
	Names head.Names
}

// HeadOptions are what a run's config says of its policy's head: the head kind, the action
// space it expects (checked against the env's), and a foreign policy's output names; empty
// fields say nothing.
type HeadOptions struct {
	Head, ActionSpace     string
	Logits, LogStd, Value string
	// Invalid is wrapped by the errors about these options (engine.ErrConfig).
	Invalid error
}

// BindHead is the head a policy of env (registered as envID) is bound with: the env's
// observation shape and typed action space, with the head, action space and output names o
// gives.
func BindHead(envID string, env envs.Spec, o HeadOptions) (Head, error) {
	h := Head{Spec: head.Spec{EnvID: envID, ObsShape: env.Observation.Shape}, Kind: head.Kind(o.Head),
		Names: head.Names{Params: o.Logits, LogStd: o.LogStd, Value: o.Value}}
	if err := h.Spec.SetSpace(env.Action); err != nil {
		return h, err
	}
	if o.ActionSpace != "" {
		var given head.Spec
		if err := given.ParseActionSpace(o.ActionSpace); err != nil {
			return h, fmt.Errorf("%w: ActionSpace: %v", o.Invalid, err)
		}
		if given.ActionSpace() != h.Spec.ActionSpace() {
			return h, fmt.Errorf("%w: ActionSpace %q is not %s's action space %s", o.Invalid, o.ActionSpace, envID, h.Spec.ActionSpace())
		}
	}
	if o.Head != "" {
		h.Spec.Head = h.Kind
		if err := h.Spec.Validate(); err != nil {
			return h, fmt.Errorf("%w: Head %q in %s's action space %s: %v", o.Invalid, o.Head, envID, env.Action, err)
		}
	}
	return h, nil
}

// Options make a run's policy (New).
type Options struct {
	Head Head
	// Foreign is the ONNX policy to fine-tune (Foreign); nil: a new Native model of the
	// architecture below.
	Foreign []byte
	// The architecture of a Native model (models.Config).
	Hidden     []int
	Activation string
	Shared     bool
	LogStdInit float32
	// Seed initialises a Native model's weights, or a foreign policy's new critic.
	Seed uint64
	// ValueWarmup is the iterations a foreign policy's new critic trains alone.
	ValueWarmup int
	Session     onnx.Config
}

// New is a run's trainable policy: the foreign policy o.Foreign bound with o.Head, or a new
// Native model of o's architecture and seed.
func New(ctx context.Context, o Options) (Model, error) {
	if o.Foreign != nil {
		return LoadForeign(ctx, o.Foreign, o.Head.Spec, ForeignOptions{Names: o.Head.Names, Head: o.Head.Kind, Session: o.Session,
			Rand: rand.New(rand.NewPCG(o.Seed, 0x63726974696373)), ValueWarmup: o.ValueWarmup})
	}
	mcfg := models.Config{Spec: o.Head.Spec, Hidden: o.Hidden, Activation: models.Activation(o.Activation), Shared: o.Shared, LogStdInit: o.LogStdInit}
	params, err := models.NewParams(mcfg, rand.New(rand.NewPCG(o.Seed, 0x706172616d73)))
	if err != nil {
		return nil, err
	}
	return Native{Params: params}, nil
}
