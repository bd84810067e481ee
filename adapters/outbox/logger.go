package outbox

import (
	"github.com/ThreeDotsLabs/watermill"
	"go.uber.org/zap"
)

// zapLogger adapts zap to Watermill. Watermill logs its life cycle at info
// level ("Starting handler", "Subscriber stopped", ...); that is debug detail
// for Taskmaster, so info and below go to debug. While quiet reports true
// (the router is closing, cancelling what is in flight) errors go to debug
// too.
type zapLogger struct {
	l     *zap.Logger
	quiet func() bool
}

// newLogger returns a Watermill logger writing to l, quiet while quiet()
// (nil: never).
func newLogger(l *zap.Logger, quiet func() bool) zapLogger {
	if l == nil {
		l = zap.NewNop()
	}
	if quiet == nil {
		quiet = func() bool { return false }
	}
	return zapLogger{l: l, quiet: quiet}
}

func (z zapLogger) Error(msg string, err error, fields watermill.LogFields) {
	level := zap.ErrorLevel
	if z.quiet() {
		level = zap.DebugLevel
	}
	z.l.Log(level, msg, append(zapFields(fields), zap.Error(err))...)
}

func (z zapLogger) Info(msg string, fields watermill.LogFields) { z.l.Debug(msg, zapFields(fields)...) }

func (z zapLogger) Debug(msg string, fields watermill.LogFields) {
	z.l.Debug(msg, zapFields(fields)...)
}

func (z zapLogger) Trace(string, watermill.LogFields) {}

func (z zapLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return zapLogger{l: z.l.With(zapFields(fields)...), quiet: z.quiet}
}

func zapFields(fields watermill.LogFields) []zap.Field {
	out := make([]zap.Field, 0, len(fields))
	for k, v := range fields {
		out = append(out, zap.Any(k, v))
	}
	return out
}
