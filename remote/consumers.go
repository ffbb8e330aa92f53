package remote

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// The batcher credential may create consumers on the run bucket and the policy store: the
// ordered consumers that watch the pointer and read the policies. It could also create durable
// ones, which never expire (1,000 of them reached the server's consumer limit and every later
// batcher waited for a policy forever), and push consumers that deliver to subjects it may not
// publish to (the learn-info subject, the learner's inbox). sweepConsumers deletes both kinds
// every consumerSweep, logging each: a batcher's own consumers are ephemeral and deliver to its
// inbox (<ns>.inbox.<id>).

// consumerSweep is how often the learner looks for consumers no batcher needs.
const consumerSweep = 2 * time.Second

// sweepConsumers runs until the Server closes (a goroutine of Serve and Connect).
func (s *Server) sweepConsumers() {
	defer s.wg.Done()
	t := time.NewTicker(consumerSweep)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		ctx, cancel := withStop(context.Background(), s.quit)
		for _, stream := range []string{"KV_" + s.names.runBucket(), "OBJ_" + s.names.policyBucket()} {
			s.sweepStream(ctx, stream)
		}
		cancel()
	}
}

// sweepStream deletes stream's durable consumers and those that push to a subject outside
// the batchers' inboxes.
func (s *Server) sweepStream(ctx context.Context, stream string) {
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		s.log.Debug("remote: listing consumers", zap.String("stream", stream), zap.Error(err))
		return
	}
	lister := st.ListConsumers(ctx)
	var bad []string
	for info := range lister.Info() {
		c := info.Config
		deliver := c.DeliverSubject
		if c.Durable != "" || deliver != "" && !strings.HasPrefix(deliver, s.names.inboxes()) {
			bad = append(bad, info.Name)
			s.log.Warn("remote: deleting a consumer no batcher needs (durable, or pushing outside the batchers' inboxes)",
				zap.String("stream", stream), zap.String("consumer", info.Name), zap.String("durable", c.Durable),
				zap.String("deliver_subject", deliver))
		}
	}
	if err := lister.Err(); err != nil {
		s.log.Debug("remote: listing consumers", zap.String("stream", stream), zap.Error(err))
	}
	for _, name := range bad {
		if err := st.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			s.log.Debug("remote: deleting a consumer", zap.String("stream", stream), zap.String("consumer", name), zap.Error(err))
		}
	}
}
