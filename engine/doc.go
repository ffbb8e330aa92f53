// Package engine holds the algorithms (losses, advantage estimators) and the training loop that
// wires batchers to the learner: collect with policy version v, learn, export v+1, hot-swap.
// It also owns run directories, checkpoints and metrics. It holds no device code.
package engine
