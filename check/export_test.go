package check

// The external tests of this package reach these internals by these names.
var (
	Sweep         = sweep
	CountOverlaps = countOverlaps
)

const Forever = forever
