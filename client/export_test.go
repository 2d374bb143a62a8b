package client

// BreakCacheReclaim gives c's lease cache a deliberate defect: a reclaimed
// lease stays in the cache and is served again, during and after its
// release. The seed-style counter test must catch it.
func BreakCacheReclaim(c *Client) { c.cache.bugs.reclaimKeepsLease = true }
