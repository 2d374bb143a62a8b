package zklike

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Defaults of Config.
const (
	// DefaultPrefix is the etcd key prefix under which every lock lives:
	// <prefix>/<escaped lock key>/<contender handle>.
	DefaultPrefix = "lockgate/zklike"

	// DefaultSessionTTL is the TTL of a lease acquired with zero options
	// (lock.DefaultTTL, 20 s), which lives under the Locker's
	// shared, automatically renewed session lease.
	DefaultSessionTTL = lock.DefaultTTL

	// DefaultDialTimeout bounds the connection to the etcd cluster.
	DefaultDialTimeout = 5 * time.Second

	// DefaultRequestTimeout bounds each etcd request (a Txn, a lease grant
	// or keep-alive, a watch creation). A request that times out is
	// reported as lock.ErrUnavailable.
	DefaultRequestTimeout = 5 * time.Second

	// DefaultDriftFactor is the holder's clock-drift allowance per unit of
	// TTL (see kit.DeadlineFor).
	DefaultDriftFactor = lock.DefaultDriftFactor

	// DefaultRetryBase and DefaultRetryMax pace the retries of a request
	// that failed because etcd was unreachable (no leader, a member down).
	DefaultRetryBase = 10 * time.Millisecond
	DefaultRetryMax  = time.Second
	// DefaultRetryAttempts is how many times such a request is retried
	// before the call gives up with lock.ErrUnavailable (about 8 s of
	// backoff: enough to ride out an etcd leader election).
	DefaultRetryAttempts = 12

	// MaxTTLSeconds caps lease TTLs at lock.MaxTTL.
	maxTTLSeconds = int64(lock.MaxTTL / time.Second)
)

// Config configures a Locker.
type Config struct {
	// Endpoints are the etcd client URLs (http://host:port). Ignored when
	// Client is set.
	Endpoints []string

	// Client, if set, is used instead of dialling Endpoints; Close leaves
	// it open. It lets a caller share one connection (and its TLS and
	// auth settings) with other etcd users.
	Client *clientv3.Client

	// Prefix namespaces the lock keys. Empty means DefaultPrefix.
	Prefix string

	// SessionTTL is the TTL of leases acquired with zero options (no TTL
	// given): they are renewed automatically and share the Locker's
	// session lease of that TTL. Zero means DefaultSessionTTL. etcd counts
	// lease TTLs in whole seconds, so it is rounded up.
	SessionTTL time.Duration

	// DialTimeout bounds connecting to the cluster. Zero means
	// DefaultDialTimeout.
	DialTimeout time.Duration

	// RequestTimeout bounds each etcd request. Zero means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration

	// Retry paces retries of requests that failed because etcd was
	// unreachable. Nil means DefaultRetry(). Waiting behind a holder never
	// uses it: waiters are woken by a watch event.
	Retry lock.RetryStrategy

	// DriftFactor is the clock-drift allowance per unit of TTL. Zero means
	// DefaultDriftFactor.
	DriftFactor float64

	// ClientID is the default owner of leases. Empty means a random
	// "zklike-…" id.
	ClientID string

	// Logger receives warnings (a waiter whose session expired, a cleanup
	// that had to be retried). Nil means slog.Default().
	Logger *slog.Logger
}

// DefaultRetry is the default Config.Retry: jittered exponential backoff
// from DefaultRetryBase to DefaultRetryMax, DefaultRetryAttempts retries.
func DefaultRetry() lock.RetryStrategy {
	return lock.ExponentialBackoff{Base: DefaultRetryBase, Max: DefaultRetryMax, Jitter: 1, MaxAttempts: DefaultRetryAttempts}
}

// DefaultConfig returns a Config for the given etcd endpoints with every
// default spelled out.
func DefaultConfig(endpoints ...string) Config {
	return Config{
		Endpoints:      endpoints,
		Prefix:         DefaultPrefix,
		SessionTTL:     DefaultSessionTTL,
		DialTimeout:    DefaultDialTimeout,
		RequestTimeout: DefaultRequestTimeout,
		Retry:          DefaultRetry(),
		DriftFactor:    DefaultDriftFactor,
	}
}

// Validate reports the first invalid field, naming it.
func (c Config) Validate() error {
	if c.Client == nil {
		if len(c.Endpoints) == 0 {
			return fmt.Errorf("zklike: Config.Endpoints: at least one etcd endpoint is required (or set Config.Client)")
		}
		for i, e := range c.Endpoints {
			if strings.TrimSpace(e) == "" {
				return fmt.Errorf("zklike: Config.Endpoints[%d]: empty endpoint", i)
			}
		}
	}
	if strings.HasSuffix(c.Prefix, "/") {
		return fmt.Errorf("zklike: Config.Prefix: %q ends with '/'; give it without (keys are <prefix>/<key>/…)", c.Prefix)
	}
	if c.SessionTTL < 0 || c.SessionTTL > lock.MaxTTL {
		return fmt.Errorf("zklike: Config.SessionTTL: %v is outside [0, %v]", c.SessionTTL, lock.MaxTTL)
	}
	if c.SessionTTL != 0 && c.SessionTTL < time.Second {
		return fmt.Errorf("zklike: Config.SessionTTL: %v is shorter than etcd's 1 s lease granularity", c.SessionTTL)
	}
	if c.DialTimeout < 0 {
		return fmt.Errorf("zklike: Config.DialTimeout: %v is negative", c.DialTimeout)
	}
	if c.RequestTimeout < 0 {
		return fmt.Errorf("zklike: Config.RequestTimeout: %v is negative", c.RequestTimeout)
	}
	if err := kit.ValidateClientConfig(c.DriftFactor, c.ClientID); err != nil {
		return fmt.Errorf("zklike: Config.%w", err)
	}
	return nil
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig(c.Endpoints...)
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = d.SessionTTL
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = d.DialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = d.RequestTimeout
	}
	if c.Retry == nil {
		c.Retry = d.Retry
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = d.DriftFactor
	}
	if c.ClientID == "" {
		c.ClientID = "zklike-" + lock.NewHandle()[:12]
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ttlSeconds rounds a TTL up to etcd's whole seconds.
func ttlSeconds(ttl time.Duration) int64 {
	s := int64((ttl + time.Second - 1) / time.Second)
	return min(max(s, 1), maxTTLSeconds)
}
