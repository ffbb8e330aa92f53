// Package policy is the policy a run trains, behind [Model]: one of towerrl's own
// architectures ([Native], package models) or a foreign ONNX policy imported for fine-tuning
// ([Foreign]: PyTorch, SB3, CleanRL, RLlib and Sample Factory exports, feed-forward or
// recurrent, given a new critic when it has no value output), trained in its own graph
// (package onnx/graph) and written back as the graph it was.
//
// The engine's trainer holds a Model and never asks which one it is: how the batchers bind its
// exports, the recurrent states its rollouts carry, the bytes a checkpoint keeps and a new
// critic's warm-up are the Model's answers. A recurrent policy is trained with
// backpropagation through time (recurrent.go): each sequence is replayed from the state the
// batchers fed at its first step, the one-step graph built once per step over shared
// parameters.
//
// Threading: a Model is used by the trainer's goroutine; each tower its factory makes is used
// by one tower goroutine. A Foreign's warm-up flags are atomic: the trainer sets them between
// iterations, the towers and the schedule read them.
package policy

import (
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
)

// Model is the trainable policy as the trainer drives it.
//
// An off-policy algorithm (a replay buffer, many small updates per collection) trains a Model
// as it is: its towers come from Towers with the algorithm's loss, its weights reach the
// collectors through Export and PublishLayout; a Q-network or a separate critic the policy
// does not export would be a Model of its own, whose Artifact is the actor alone (as a
// Foreign's new critic is left out of policy.onnx).
type Model interface {
	// Flat is the trainable parameters in one vector, which the learner updates in place.
	Flat() []float32
	// HeadSpec is the head the loss computes.
	HeadSpec() head.Spec
	// Export is the graph the batchers run, with the current weights, as policy version
	// version.
	Export(version int64) ([]byte, error)
	// Artifact is policy.onnx for an export (model) of version.
	Artifact(model []byte, version int64) ([]byte, error)
	// Trained is the graph the batchers run when it differs from the artifact (it is written
	// beside it as policy_with_critic.onnx), else nil.
	Trained(model []byte) []byte
	// Towers makes the towers of a's loss over the model; seqLen is the length of the
	// sequences a recurrent model is unrolled over (its towers' rows count sequences then),
	// unused by a feed-forward one.
	Towers(a algo.Algorithm, seqLen int) learner.TowerFactory
	// PublishLayout places Flat's weights in the exported graph, for Batcher.Publish.
	PublishLayout() []bind.Param
	// Binding is how the batchers bind the exports.
	Binding() Binding
	// States are the recurrent states the policy carries from one step to the next, which
	// every rollout records; none for a feed-forward policy.
	States() []State
	// Source is what a checkpoint keeps of the model so that a resume needs no file (the
	// imported policy's bytes), nil when the config alone makes it.
	Source() []byte
	// Schedule is the run's learning-rate schedule s (updatesPerIter updates an iteration)
	// as the model trains under it: s, or s boosted while a new critic warms up.
	Schedule(s learner.Schedule, updatesPerIter int) learner.Schedule
	// BeginIteration readies iteration it (0-based, counted over the run and its resumes)
	// before it collects; opt is the run's optimiser.
	BeginIteration(it int, opt learner.Optimizer)
	// Targets is handed iteration it's value targets (the batch's returns) before its
	// update.
	Targets(it int, returns []float32)
}

// Binding is how the batchers bind a Model's exports: the graph input that takes the
// observations, and the outputs by name (zero fields: recognised, see bind.Config).
type Binding struct {
	Input string
	Names head.Names
}

// State is a recurrent state a Model carries: its graph input's name and its values per env.
type State struct {
	Name string
	Dim  int
}

var (
	_ Model = Native{}
	_ Model = (*Foreign)(nil)
)
