// Package cli holds what every towerrl command shares: the zap logger set-up for the
// --log-level and --log-json flags (human console output on stderr by default), and the
// one JSON summary object (one line) each command prints on stdout.
package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

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

// Main is the body of a command's main after flag parsing: it builds the logger, runs fn with a
// context that Ctrl-C cancels, logs fn's error, and exits with 0 on success, 1 when fn fails and
// 2 when the logging flags are bad.
func Main(name string, l LogFlags, fn func(ctx context.Context, log *zap.Logger) error) {
	log, err := Logger(l.Level, l.JSON)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = fn(ctx, log)
	stop()
	if err != nil {
		log.Error(name+" failed", zap.Error(err))
		log.Sync()
		os.Exit(1)
	}
}
