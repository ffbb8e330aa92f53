// Package cli holds what every towerrl command shares: the zap logger set-up for the
// --log-level and --log-json flags (human console output on stderr by default), and the
// one JSON summary object (one line) each command prints on stdout.
package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

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
