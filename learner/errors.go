package learner

import "errors"

var (
	// ErrBatch: a batch operation on incompatible or too-small batches.
	ErrBatch = errors.New("learner: sample batch")
	// ErrSplit: a minibatch that cannot be split over the towers.
	ErrSplit = errors.New("learner: cannot split the minibatch over the towers")
	// ErrConfig: an invalid configuration field.
	ErrConfig = errors.New("learner: invalid config")
	// ErrClosed: a call on a closed learner.
	ErrClosed = errors.New("learner: closed")
)
