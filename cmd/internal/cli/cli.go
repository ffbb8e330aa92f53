// Package cli holds what every towerrl command shares: the zap logger set-up for the
// --log-level and --log-json flags (human console output on stderr by default), and the
// one JSON summary object (one line) each command prints on stdout.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Logger builds a logger writing to stderr at level (debug, info, warn, error), as JSON
// lines when jsonLines is set, else as human console lines.
func Logger(level string, jsonLines bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
	encoder := zapcore.NewConsoleEncoder(enc)
	if jsonLines {
		encoder = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.Lock(os.Stderr), lvl)), nil
}

// Summary writes v as one JSON object on one line.
func Summary(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// NoArgs returns an error when fs was left positional arguments. The flag package stops at
// the first argument that is not a flag, so `train --env X oops --seed 1` would otherwise run
// with --seed unread: the error names the argument and the flags that were not read.
func NoArgs(fs *flag.FlagSet) error {
	args := fs.Args()
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unexpected argument %q: the tools take flags only", args[0])
	if len(args) > 1 {
		msg += fmt.Sprintf(", and everything after it (%q) was not read", args[1:])
	}
	return errors.New(msg + " (a value with spaces needs quotes; every flag starts with -)")
}

// Usage makes fs's --help text open with one line saying what the tool does and examples of
// its use, then list the flags as the flag package does.
func Usage(fs *flag.FlagSet, name, what string, examples ...string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "%s: %s\n\nExamples:\n", name, what)
		for _, e := range examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
		fmt.Fprintf(w, "\nFlags:\n")
		fs.PrintDefaults()
	}
}

// LogFlags are the --log-level and --log-json flags every command takes.
type LogFlags struct {
	Level string
	JSON  bool
}

// Register adds the flags to fs.
func (l *LogFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&l.Level, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&l.JSON, "log-json", false, "log JSON lines instead of console text")
}

// Main is the body of a command's main after flag parsing (of flag.CommandLine): it refuses
// positional arguments, builds the logger, runs fn with a context that SIGINT (Ctrl-C) or
// SIGTERM cancels, logs fn's error, and exits with 0 on success, 1 when fn fails and 2 when the
// command line is bad. A process whose fn has not returned [ForceExitAfter] after the signal,
// or that gets a second one, exits with 1 at once.
func Main(name string, l LogFlags, fn func(ctx context.Context, log *zap.Logger) error) {
	main(name, l, false, func(ctx context.Context, _ <-chan struct{}, log *zap.Logger) error { return fn(ctx, log) })
}

// MainGraceful is Main for commands that can stop cleanly: the first SIGINT or SIGTERM closes
// stop (the command finishes what it is doing, saves its state and returns); a second one
// cancels ctx and the process exits within [ForceExitAfter] (a third: at once).
func MainGraceful(name string, l LogFlags, fn func(ctx context.Context, stop <-chan struct{}, log *zap.Logger) error) {
	main(name, l, true, fn)
}

// ForceExitAfter is how long a command may take to return once a signal cancelled its
// context (the second SIGINT or SIGTERM of a graceful command, the first of another): past
// it, or at the next signal, the process exits with status 1 at once. Run directories and
// files are written atomically, so what an exit cuts short is left as a kill would leave it.
const ForceExitAfter = 2 * time.Second

// exit logs msg and ends the process with status 1.
func exit(log *zap.Logger, msg string) {
	log.Error(msg)
	log.Sync()
	os.Exit(1)
}

func main(name string, l LogFlags, graceful bool, fn func(ctx context.Context, stop <-chan struct{}, log *zap.Logger) error) {
	if err := NoArgs(flag.CommandLine); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	log, err := Logger(l.Level, l.JSON)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var deadline <-chan time.Time
		for n := 1; ; n++ {
			select {
			case s := <-sigs:
				switch {
				case graceful && n == 1:
					log.Warn(fmt.Sprintf("got %v: finishing the current step and saving state; send it again to stop at once", s))
					close(stop)
				case deadline == nil:
					// ctx's cancellation ends every wait that honours it; a call that cannot be
					// interrupted (a read from a FIFO, ONNX Runtime building a session) must not
					// keep the process alive.
					log.Warn(fmt.Sprintf("got %v: stopping (within %v, or at once on the next signal)", s, ForceExitAfter))
					cancel()
					deadline = time.After(ForceExitAfter)
				default:
					exit(log, fmt.Sprintf("got %v again: exiting now", s))
				}
			case <-deadline:
				exit(log, fmt.Sprintf("still running %v after the signal to stop: exiting now", ForceExitAfter))
			case <-done:
				return
			}
		}
	})
	err = fn(ctx, stop, log)
	signal.Stop(sigs)
	close(done)
	wg.Wait()
	cancel()
	if err != nil {
		log.Error(name+" failed", zap.Error(err))
		log.Sync()
		os.Exit(1)
	}
}
