package outbox

import (
	"github.com/ThreeDotsLabs/watermill"
	"go.uber.org/zap"
)

// zapLogger adapts zap to Watermill. Watermill logs its life cycle at info
// level ("Starting handler", "Subscriber stopped", ...); that is debug detail
// for Taskmaster, so info and below go to debug.
type zapLogger struct {
	l *zap.Logger
}

// NewLogger returns a Watermill logger writing to l.
func NewLogger(l *zap.Logger) watermill.LoggerAdapter {
	if l == nil {
		l = zap.NewNop()
	}
	return zapLogger{l: l}
}

func (z zapLogger) Error(msg string, err error, fields watermill.LogFields) {
	z.l.Error(msg, append(zapFields(fields), zap.Error(err))...)
}

func (z zapLogger) Info(msg string, fields watermill.LogFields) { z.l.Debug(msg, zapFields(fields)...) }

func (z zapLogger) Debug(msg string, fields watermill.LogFields) {
	z.l.Debug(msg, zapFields(fields)...)
}

func (z zapLogger) Trace(string, watermill.LogFields) {}

func (z zapLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return zapLogger{l: z.l.With(zapFields(fields)...)}
}

func zapFields(fields watermill.LogFields) []zap.Field {
	out := make([]zap.Field, 0, len(fields))
	for k, v := range fields {
		out = append(out, zap.Any(k, v))
	}
	return out
}
