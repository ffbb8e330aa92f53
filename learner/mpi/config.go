package mpi

import (
	"fmt"
	"time"
)

// Defaults of Config's zero fields.
const (
	DefaultTimeout = 10 * time.Minute
	DefaultGrace   = 250 * time.Millisecond
	DefaultSpin    = 100 * time.Millisecond
)

// Config tunes a World. The zero value is the default for every field.
type Config struct {
	// Timeout bounds every collective call whose context has no earlier deadline, so a hung
	// rank ends the job with an error instead of a silent hang. 0 means DefaultTimeout
	// (10 minutes); a negative value means no bound beyond the context's.
	Timeout time.Duration
	// Grace is how long a rank that gave up on a collective waits to hear from the other ranks
	// where they are, to name the ones that never arrived. 0 means DefaultGrace (250 ms).
	Grace time.Duration
	// Spin is how long a call polls MPI back to back (yielding the CPU to other runnable
	// threads between polls) before it starts sleeping between polls (naps doubling from 50 µs
	// to 1 ms). A collective's data moves only while every rank polls, so spinning keeps it
	// fast; sleeping frees the core while a rank waits long for slower ones, at the price of a
	// few ms once they arrive. 0 means DefaultSpin (100 ms).
	Spin time.Duration
}

// withDefaults validates c and fills in its zero fields.
func (c Config) withDefaults() (Config, error) {
	if c.Grace < 0 {
		return c, fmt.Errorf("%w: Config.Grace %v is negative (0 means %v)", ErrArgument, c.Grace, DefaultGrace)
	}
	if c.Spin < 0 {
		return c, fmt.Errorf("%w: Config.Spin %v is negative (0 means %v)", ErrArgument, c.Spin, DefaultSpin)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	return c, nil
}

// Op is a reduction operator of AllReduceFloat64.
type Op int

const (
	Sum Op = iota // element-wise sum
	Max           // element-wise maximum
	Min           // element-wise minimum
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// call names a World's collective operations in errors and in the messages ranks exchange
// when one gives up.
type call int64

const (
	callWeighted call = iota + 1
	callReduce
	callBcast
	callCheckSame
	callGatherSizes
	callGather
	callBarrier
	callFinish
)

func (c call) String() string {
	switch c {
	case callWeighted:
		return "allreduce-weighted"
	case callReduce:
		return "allreduce-float64"
	case callBcast:
		return "bcast"
	case callCheckSame:
		return "check-same"
	case callGatherSizes:
		return "gather-sizes"
	case callGather:
		return "gather"
	case callBarrier:
		return "barrier"
	case callFinish:
		return "finish-rollout"
	}
	return fmt.Sprintf("call(%d)", int64(c))
}
