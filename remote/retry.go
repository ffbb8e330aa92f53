package remote

import (
	"context"
	"time"
)

// backoff waits between retries: min, doubling up to max, reset after a success.
type backoff struct {
	min, max time.Duration
	next     time.Duration
}

// wait sleeps for the next delay or until ctx ends.
func (b *backoff) wait(ctx context.Context) {
	if b.next == 0 {
		b.next = b.min
	}
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	b.next = min(2*b.next, b.max)
}

func (b *backoff) reset() { b.next = 0 }

// withStop returns a context that ends with parent or when any of stops is closed. The
// caller must call cancel.
func withStop(parent context.Context, stops ...<-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	for _, stop := range stops {
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}
