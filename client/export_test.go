package client

// BreakCacheReclaim gives c's lease cache a deliberate defect: a reclaimed
// lease stays servable while its release is on the way. The seed-style
// counter test must catch it.
func BreakCacheReclaim(c *Client) { c.cache.bugs.reclaimKeepsLease = true }
