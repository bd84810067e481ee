//go:build race

package binserver

// raceEnabled: the tests run with the race detector, so the server binary
// is built with it too.
const raceEnabled = true
