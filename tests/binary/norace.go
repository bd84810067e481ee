//go:build !race

package binary

// RaceEnabled: this package is built without the race detector.
const RaceEnabled = false
