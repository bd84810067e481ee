package tests

import (
	"testing"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

// TestMain is the one TestMain of package tests: every test gets its own
// database from pgtest on a throwaway server it starts.
func TestMain(m *testing.M) { pgtest.Main(m) }
