package redlock

import (
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Defaults of Config.
const (
	// DefaultNodeTimeout bounds every request to one Redis node (dial,
	// write and read). The Redlock algorithm wants it small compared with
	// the TTL, so that an unreachable node costs a round, not the lease.
	DefaultNodeTimeout = 100 * time.Millisecond

	// DefaultDriftFactor is the clock-drift allowance per unit of TTL
	// (the Redlock paper's CLOCK_DRIFT_FACTOR): drift = TTL·factor + 2 ms.
	DefaultDriftFactor = lock.DefaultDriftFactor

	// DefaultRetryBase and DefaultRetryMax bound the jittered exponential
	// backoff of Acquire after an attempt that failed without a quorum
	// holder to wait for (nodes unreachable, or votes split between
	// contenders).
	DefaultRetryBase = 2 * time.Millisecond
	DefaultRetryMax  = 250 * time.Millisecond

	// DefaultPrefix is the namespace of every Redis key and channel.
	DefaultPrefix = "lockgate"

	// DefaultPoolSize is the connection pool size per node.
	DefaultPoolSize = 64

	// MaxNodes is the largest number of Redis masters a Locker accepts.
	MaxNodes = 64
)

// Config configures a Locker.
type Config struct {
	// Addrs are the host:port addresses of N independent Redis masters
	// (no replication between them). N = 1 is plain single-Redis locking;
	// N ≥ 3 (odd) is Redlock, tolerating (N−1)/2 failed nodes.
	Addrs []string

	// NodeTimeout bounds each request to one node. Zero means
	// DefaultNodeTimeout.
	NodeTimeout time.Duration

	// DriftFactor is the clock-drift allowance per unit of TTL. Zero means
	// DefaultDriftFactor.
	DriftFactor float64

	// Retry paces Acquire's retries after an attempt that failed without a
	// quorum holder to wait for. Nil means DefaultRetry(). Waiting behind a
	// holder never uses it: waiters wake on the holder's release message
	// or when its TTL runs out.
	Retry lock.RetryStrategy

	// Prefix namespaces keys and channels. Empty means DefaultPrefix.
	Prefix string

	// ClientID is the default owner of leases (AcquireOptions.Owner). Empty
	// means a random "redlock-…" id.
	ClientID string

	// Username and Password authenticate with every node (optional).
	Username, Password string

	// PoolSize is the number of connections per node. Zero means
	// DefaultPoolSize.
	PoolSize int
}

// DefaultRetry is the default Config.Retry: jittered exponential backoff
// from DefaultRetryBase to DefaultRetryMax without an attempt limit.
func DefaultRetry() lock.RetryStrategy {
	return lock.ExponentialBackoff{Base: DefaultRetryBase, Max: DefaultRetryMax, Jitter: 1}
}

// DefaultConfig returns a Config for the given nodes with every default
// spelled out.
func DefaultConfig(addrs ...string) Config {
	return Config{
		Addrs:       addrs,
		NodeTimeout: DefaultNodeTimeout,
		DriftFactor: DefaultDriftFactor,
		Retry:       DefaultRetry(),
		Prefix:      DefaultPrefix,
		PoolSize:    DefaultPoolSize,
	}
}

// Validate reports the first invalid field, naming it.
func (c Config) Validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("redlock: Config.Addrs: at least one Redis address is required")
	}
	if len(c.Addrs) > MaxNodes {
		return fmt.Errorf("redlock: Config.Addrs: %d addresses, more than the maximum of %d", len(c.Addrs), MaxNodes)
	}
	seen := make(map[string]bool, len(c.Addrs))
	for i, a := range c.Addrs {
		if a == "" {
			return fmt.Errorf("redlock: Config.Addrs[%d]: empty address", i)
		}
		if seen[a] {
			return fmt.Errorf("redlock: Config.Addrs[%d]: %q is listed twice (the nodes must be independent)", i, a)
		}
		seen[a] = true
	}
	if c.NodeTimeout < 0 {
		return fmt.Errorf("redlock: Config.NodeTimeout: %v is negative", c.NodeTimeout)
	}
	if c.PoolSize < 0 {
		return fmt.Errorf("redlock: Config.PoolSize: %d is negative", c.PoolSize)
	}
	if err := kit.ValidateClientConfig(c.DriftFactor, c.ClientID); err != nil {
		return fmt.Errorf("redlock: Config.%w", err)
	}
	return nil
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig(c.Addrs...)
	if c.NodeTimeout == 0 {
		c.NodeTimeout = d.NodeTimeout
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = d.DriftFactor
	}
	if c.Retry == nil {
		c.Retry = d.Retry
	}
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.PoolSize == 0 {
		c.PoolSize = d.PoolSize
	}
	if c.ClientID == "" {
		c.ClientID = "redlock-" + lock.NewHandle()[:12]
	}
	return c
}
