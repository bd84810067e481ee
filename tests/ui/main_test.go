package ui_test

import (
	"testing"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
