package engine

import (
	"context"
	"errors"
	"testing"
)

// The tests that cut a run short: trainKilled cancels its context as a kill would, trainStopped
// asks it to stop (Options.Stop), both once iteration at has ended, after that iteration's
// metrics line and checkpoint (Options.Progress is called last).

// cutAt is opts whose Progress calls cut when iteration at ends.
func cutAt(opts Options, at int, cut func()) Options {
	opts.Progress = func(m Metrics) {
		if m.Iteration == at {
			cut()
		}
	}
	return opts
}

// trainKilled trains cfg with opts, cancelling the run's context when iteration at ends, and
// fails the test unless Train returns the cancellation.
func trainKilled(t *testing.T, cfg Config, opts Options, at int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := Train(ctx, cfg, cutAt(opts, at, cancel)); !errors.Is(err, context.Canceled) {
		t.Fatalf("the run killed after iteration %d: %v", at, err)
	}
}

// trainStopped trains cfg with opts, closing Options.Stop when iteration at ends, and returns
// Train's error (ErrStopped, with how to continue, when it stopped).
func trainStopped(cfg Config, opts Options, at int) error {
	stop := make(chan struct{})
	opts.Stop = stop
	_, err := Train(context.Background(), cfg, cutAt(opts, at, func() { close(stop) }))
	return err
}
