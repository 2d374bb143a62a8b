package sqllock

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Defaults of Config.
const (
	// DefaultTable is the lock table, created on start if missing.
	DefaultTable = "lockgate_locks"

	// DefaultPoolSize is the maximum number of pooled connections per
	// Locker (the listening connection comes on top).
	DefaultPoolSize = 16

	// DefaultQueryTimeout bounds each round trip to the database when the
	// caller's context has no earlier deadline, and each acquire attempt
	// (which is never cut short by the caller: its outcome must be known).
	DefaultQueryTimeout = 5 * time.Second

	// DefaultSweepInterval is how often each Locker deletes expired rows.
	DefaultSweepInterval = time.Minute

	// DefaultListenPing is how long the listening connection may stay
	// silent before it is pinged, so that a server that stopped answering
	// (paused, partitioned) is noticed and the connection replaced.
	DefaultListenPing = 10 * time.Second

	// DefaultRetryBase and DefaultRetryMax bound the jittered exponential
	// backoff of Acquire after an attempt that failed because the database
	// was unavailable.
	DefaultRetryBase = 10 * time.Millisecond
	DefaultRetryMax  = time.Second

	// DefaultDriftFactor is the clock-drift allowance per unit of TTL.
	DefaultDriftFactor = lock.DefaultDriftFactor

	// maxIdent is PostgreSQL's identifier limit (NAMEDATALEN − 1), in bytes.
	maxIdent = 63
	// seqSuffix names the token sequence after the table.
	seqSuffix = "_token_seq"
)

// Config configures a Locker.
type Config struct {
	// URL is a PostgreSQL connection string (URL or key=value form, as
	// accepted by pgx), e.g. postgres://user:pw@host:5432/db?sslmode=disable.
	URL string

	// Table is the lock table: "name" (resolved through the connection's
	// search_path) or "schema.name" (the schema is created if missing).
	// Each part is taken literally and quoted: case and any character but
	// control characters are kept. Empty means DefaultTable. The token
	// sequence is the table's name with "_token_seq" appended, in the same
	// schema.
	Table string

	// PoolSize is the maximum number of pooled connections. Zero means
	// DefaultPoolSize.
	PoolSize int

	// QueryTimeout bounds each round trip (through the connection's socket
	// deadline), each new connection unless the URL sets connect_timeout,
	// and the check of a pooled connection that was idle for over a
	// second. Waiting for a pooled connection while all PoolSize are busy
	// is bounded only by the caller's context and by the statements
	// ahead. Zero means DefaultQueryTimeout.
	QueryTimeout time.Duration

	// SweepInterval is how often expired rows are deleted. Zero means
	// DefaultSweepInterval; negative disables the sweeper (expired rows
	// are then only overwritten by the next acquire of their key).
	SweepInterval time.Duration

	// ListenPing is the silence after which the listening connection is
	// checked. Zero means DefaultListenPing.
	ListenPing time.Duration

	// Retry paces Acquire's retries after an attempt failed because the
	// database was unavailable. Nil means DefaultRetry(). Waiting behind a
	// holder never uses it: waiters wake on the holder's release
	// notification or when its TTL runs out.
	Retry lock.RetryStrategy

	// DriftFactor is the clock-drift allowance per unit of TTL. Zero means
	// DefaultDriftFactor.
	DriftFactor float64

	// ClientID is the default owner of leases. Empty means a random
	// "sqllock-…" id.
	ClientID string

	// Logger receives connection-loss and sweeper messages. Nil means no
	// logging.
	Logger *slog.Logger
}

// DefaultRetry is the default Config.Retry: jittered exponential backoff
// from DefaultRetryBase to DefaultRetryMax without an attempt limit.
func DefaultRetry() lock.RetryStrategy {
	return lock.ExponentialBackoff{Base: DefaultRetryBase, Max: DefaultRetryMax, Jitter: 1}
}

// DefaultConfig returns a Config for the database at url with every
// default spelled out.
func DefaultConfig(url string) Config {
	return Config{
		URL:           url,
		Table:         DefaultTable,
		PoolSize:      DefaultPoolSize,
		QueryTimeout:  DefaultQueryTimeout,
		SweepInterval: DefaultSweepInterval,
		ListenPing:    DefaultListenPing,
		Retry:         DefaultRetry(),
		DriftFactor:   DefaultDriftFactor,
	}
}

// Validate reports the first invalid field, naming it.
func (c Config) Validate() error {
	if c.URL == "" {
		return fmt.Errorf("sqllock: Config.URL: a PostgreSQL connection string is required")
	}
	if c.Table != "" {
		if _, err := parseTable(c.Table); err != nil {
			return err
		}
	}
	switch {
	case c.PoolSize < 0:
		return fmt.Errorf("sqllock: Config.PoolSize: %d is negative", c.PoolSize)
	case c.PoolSize > 1<<20:
		return fmt.Errorf("sqllock: Config.PoolSize: %d is absurdly large", c.PoolSize)
	case c.QueryTimeout < 0:
		return fmt.Errorf("sqllock: Config.QueryTimeout: %v is negative", c.QueryTimeout)
	case c.ListenPing < 0:
		return fmt.Errorf("sqllock: Config.ListenPing: %v is negative", c.ListenPing)
	}
	if err := kit.ValidateClientConfig(c.DriftFactor, c.ClientID); err != nil {
		return fmt.Errorf("sqllock: Config.%w", err)
	}
	return nil
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig(c.URL)
	if c.Table == "" {
		c.Table = d.Table
	}
	if c.PoolSize == 0 {
		c.PoolSize = d.PoolSize
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = d.QueryTimeout
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = d.SweepInterval
	}
	if c.ListenPing == 0 {
		c.ListenPing = d.ListenPing
	}
	if c.Retry == nil {
		c.Retry = d.Retry
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = d.DriftFactor
	}
	if c.ClientID == "" {
		c.ClientID = "sqllock-" + lock.NewHandle()[:12]
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// names are the SQL names derived from Config.Table, quoted.
type names struct {
	schema  string // quoted schema, "" when the table is unqualified
	table   string // quoted, schema-qualified where given
	seq     string // quoted sequence, same schema
	holders string // quoted table of shared holders (shared.go), same schema
	queue   string // quoted table of queued waiters (queue.go), same schema
	channel string // LISTEN/NOTIFY channel (unquoted; at most 63 bytes)
	plain   string // Config.Table as given, for messages
}

// parseTable splits "schema.table" (at most one dot) and quotes each part
// with pgx.Identifier. It rejects what PostgreSQL cannot store faithfully
// (empty parts, control characters including NUL, names that would be
// truncated) with an error naming Config.Table.
func parseTable(s string) (names, error) {
	bad := func(reason string) (names, error) {
		return names{}, fmt.Errorf("sqllock: Config.Table %q: %s", s, reason)
	}
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return bad(`use "table" or "schema.table" (at most one dot; names are quoted literally)`)
	}
	for i, p := range parts {
		max := maxIdent
		what := "schema"
		if i == len(parts)-1 {
			what = "table"
			max = maxIdent - len(seqSuffix) // the sequence name must fit too
		}
		switch {
		case p == "":
			return bad("empty " + what + " name")
		case !utf8.ValidString(p):
			return bad(what + " name is not valid UTF-8")
		case len(p) > max:
			return bad(fmt.Sprintf("%s name is %d bytes, longer than the maximum of %d", what, len(p), max))
		}
		for _, r := range p {
			if r < 0x20 || r == 0x7f {
				return bad(what + " name contains a control character")
			}
		}
	}
	n := names{plain: s}
	tbl := parts[len(parts)-1]
	if len(parts) == 2 {
		n.schema = pgx.Identifier{parts[0]}.Sanitize()
		n.table = pgx.Identifier{parts[0], tbl}.Sanitize()
		n.seq = pgx.Identifier{parts[0], tbl + seqSuffix}.Sanitize()
		n.holders = pgx.Identifier{parts[0], tbl + holdersSuffix}.Sanitize()
		n.queue = pgx.Identifier{parts[0], tbl + queueSuffix}.Sanitize()
	} else {
		n.table = pgx.Identifier{tbl}.Sanitize()
		n.seq = pgx.Identifier{tbl + seqSuffix}.Sanitize()
		n.holders = pgx.Identifier{tbl + holdersSuffix}.Sanitize()
		n.queue = pgx.Identifier{tbl + queueSuffix}.Sanitize()
	}
	n.channel = "lockgate:" + s
	if len(n.channel) > maxIdent {
		sum := sha256.Sum256([]byte(s))
		n.channel = "lockgate:" + hex.EncodeToString(sum[:12])
	}
	return n, nil
}
