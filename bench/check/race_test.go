//go:build race

package check

const raceEnabled = true
