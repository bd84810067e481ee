//go:build race

package crash_test

// raceEnabled: the test binary runs with the race detector, so the server
// binary is built with it too (its packages are then already compiled).
const raceEnabled = true
