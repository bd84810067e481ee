//go:build race

package binary

// RaceEnabled: this package is built with the race detector, so the tests
// run with it and the binary is built with it too.
const RaceEnabled = true
