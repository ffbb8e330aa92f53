package learner_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/learner"
)

// lineTower fits y = w·x + b to the returns of a batch with one observation per row, by the
// mean squared error: params is [w, b], read in place, and the gradient is worked by hand.
type lineTower struct{ params []float32 }

func (l *lineTower) StatNames() []string { return []string{"loss"} }
func (l *lineTower) Close() error        { return nil }

func (l *lineTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	n := float32(mb.Len())
	grads[0], grads[1], stats[0] = 0, 0, 0
	for i := range mb.Len() {
		x := mb.Obs[i]
		e := l.params[0]*x + l.params[1] - mb.Returns[i]
		grads[0] += e * x / n
		grads[1] += e / n
		stats[0] += float64(e*e) / float64(2*n)
	}
	return nil
}

func lineTowers(_ int, _ device.Device, _ int, params []float32) (learner.Tower, error) {
	return &lineTower{params: params}, nil
}

// lineBatch holds rows of y = 2x − 1 at random x in [−1, 1).
func lineBatch(rows int, seed uint64) *learner.SampleBatch {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := learner.NewSampleBatch(rows, 1, 1, 0)
	for i := range rows {
		x := float32(rng.Float64()*2 - 1)
		b.Obs[i], b.Returns[i] = x, 2*x-1
	}
	b.SetLen(rows)
	return b
}

// Two towers fit a line, each taking half of every minibatch; their gradients are averaged and
// applied once to the one shared parameter vector.
func ExampleTowers() {
	data := lineBatch(256, 1)
	params := []float32{0, 0} // w, b
	towers, err := learner.NewTowers(learner.TowersConfig{N: 2, Minibatch: 64}, params,
		learner.NewSGD(len(params), learner.Constant(0.5), 0.5), data, lineTowers)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer towers.Close()
	var last learner.UpdateStats
	var firstLoss float64
	for epoch := range 30 {
		for lo := 0; lo < data.Len(); lo += 64 {
			if last, err = towers.Update(context.Background(), data, lo, lo+64); err != nil {
				fmt.Println(epoch, err)
				return
			}
			if towers.Version() == 1 {
				firstLoss = last.Stats[0] // Stats is reused by the next Update
			}
		}
	}
	fmt.Printf("%d updates of %d rows: w = %.3f, b = %.3f\n", towers.Version(), last.Rows, params[0], params[1])
	fmt.Printf("loss %.3f at the first, below 1e-9 at the last: %v\n", firstLoss, last.Stats[0] < 1e-9)
	// Output:
	// 120 updates of 64 rows: w = 2.000, b = -1.000
	// loss 1.162 at the first, below 1e-9 at the last: true
}

// Every member of a Local group calls AllReduce with its buffer, and all get the mean.
func ExampleLocal() {
	group := learner.NewLocal(3)
	bufs := [][]float32{{1, 10}, {2, 20}, {6, 60}}
	var wg sync.WaitGroup
	for i, buf := range bufs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := group.AllReduce(context.Background(), i, buf); err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println(bufs)
	// Output: [[3 30] [3 30] [3 30]]
}

// The asynchronous learner trains on submitted batches in the background, SGDIters shuffled
// passes over each, and posts a Result per batch; Weights reads the latest parameters at any
// time.
func ExampleNew() {
	params := []float32{0, 0}
	layout := learner.NewSampleBatch(128, 1, 1, 0)
	towers, err := learner.NewTowers(learner.TowersConfig{N: 2, Minibatch: 32}, params,
		learner.NewAdam(len(params), learner.Constant(0.1), 0, 0, 0), layout, lineTowers)
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := learner.New(learner.Config{TrainBatch: 128, SGDIters: 3, Seed: 7}, towers, layout)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close() // closes the towers too
	ctx := context.Background()
	go func() {
		for k := range 20 {
			if err := l.Submit(ctx, lineBatch(128, uint64(k))); err != nil {
				fmt.Println(err)
				return
			}
		}
	}()
	for k := range 20 {
		r := <-l.Results()
		if r.Err != nil {
			fmt.Println(r.Err)
			return
		}
		if k%10 == 0 {
			fmt.Printf("batch %d: %d rows trained %d times in %d updates, version %d\n", k, r.Samples, r.Trained/r.Samples, r.Updates, r.Version)
		}
	}
	w := make([]float32, 2)
	version, err := l.Weights(w)
	fmt.Printf("version %d: w = %.2f, b = %.2f (%v)\n", version, w[0], w[1], err)
	// Output:
	// batch 0: 128 rows trained 3 times in 12 updates, version 12
	// batch 10: 128 rows trained 3 times in 12 updates, version 132
	// version 240: w = 2.00, b = -1.00 (<nil>)
}
