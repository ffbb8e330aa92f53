package remote

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// WatchConfig configures Watch (batcher --watch URL --creds FILE).
type WatchConfig struct {
	// Client configures the connection: the credential (a batcher's may watch), CAFile,
	// Namespace.
	Client ClientConfig
	// ConnectTimeout bounds the wait for the learner's server to answer at the start
	// (default 1 min; negative: wait forever). Once connected, a watcher waits for a
	// restarting learner forever.
	ConnectTimeout time.Duration
	// Info receives each learn-info line the learner publishes (a metrics JSON object),
	// on Watch's goroutine. Required.
	Info func(line []byte)
	// Stop, when closed, ends the watch (Ended "stopped").
	Stop <-chan struct{}
}

// WatchSummary is what Watch saw.
type WatchSummary struct {
	URL     string          `json:"url"`
	Lines   int             `json:"lines"`          // learn-info lines received
	Last    json.RawMessage `json:"last,omitempty"` // the newest of them, when it is JSON
	Ended   string          `json:"ended"`          // "run ended" (the learner's End) or "stopped" (WatchConfig.Stop)
	Seconds float64         `json:"seconds"`
}

// Watch follows a learner's learn-info lines without collecting: it dials url, hands each
// line to cfg.Info, and returns when the learner ends the run (Ended "run ended"), cfg.Stop
// closes ("stopped") or ctx ends (ctx's error). Learn-info lines are not stored: a watcher
// sees those published while it listens, across learner restarts. It neither registers nor
// takes a task, so it changes nothing in the run. Dial errors say what to do, as
// RunBatcher's: ErrUnauthorized, ErrUnreachable.
func Watch(ctx context.Context, url string, cfg WatchConfig) (WatchSummary, error) {
	sum := WatchSummary{URL: url}
	if cfg.Info == nil {
		return sum, errors.New("remote: WatchConfig.Info is nil: give the function that shows the learn-info lines")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = time.Minute
	}
	start := time.Now()
	c, err := dialWithin(ctx, url, cfg.Client, cfg.ConnectTimeout)
	if err != nil {
		return sum, err
	}
	wctx, wcancel := withStop(ctx, cfg.Stop)
	lines := c.Info(wctx)
	for line := range lines { // closed by the run's end, Stop or ctx
		sum.Lines++
		if json.Valid(line) {
			sum.Last = append(sum.Last[:0], line...)
		}
		cfg.Info(line)
	}
	wcancel()
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case isDone(c.Done()):
		sum.Ended = "run ended"
	default:
		sum.Ended = "stopped"
	}
	sum.Seconds = time.Since(start).Seconds()
	return sum, errors.Join(err, c.Close())
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
