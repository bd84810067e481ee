//go:build !race

package binserver

const raceEnabled = false
