//go:build race

package linearize

const raceEnabled = true
