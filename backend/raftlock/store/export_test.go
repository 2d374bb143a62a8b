package store

// SetWALSegmentSize makes the raft-wal segments Open creates n bytes long
// until restore is called, so that a test sees segments seal every few
// dozen appends instead of every 64 MiB.
func SetWALSegmentSize(n int) (restore func()) {
	old := walSegmentSize
	walSegmentSize = n
	return func() { walSegmentSize = old }
}
