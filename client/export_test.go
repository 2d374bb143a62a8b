package client

// BreakCacheReclaim gives c's lease cache a deliberate defect: a reclaimed
// lease stays in the cache and is served again, during and after its
// release. The seed-style counter test must catch it.
func BreakCacheReclaim(c *Client) { c.cache.bugs.reclaimKeepsLease = true }

// OnWatchOverflow makes c call f when a watch's buffer (WatchBuffer)
// overflows. Set it before the first Watch.
func OnWatchOverflow(c *Client, f func()) { c.watchOverflowed = f }

// StopSessionKeepAlive stops the keep-alive of c's own session, as if the
// client had been paused: the session, and every lease in it, then runs
// out on both sides.
func StopSessionKeepAlive(c *Client) { c.stopOwnSession() }
