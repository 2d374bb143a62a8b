package raftlock

import (
	"github.com/lockgate/lockgate/internal/audit"

	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/internal/netguard"
)

// Default ports (the design's, docs/raftlock.md): the Raft transport
// listens on 8080+id and the client API (WebSocket/REST gateway and the
// membership endpoints) on 50050+id.
const (
	DefaultRaftPortBase = 8080
	DefaultAPIPortBase  = 50050
)

// Defaults of Config.
const (
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = time.Second
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultCommitTimeout      = 50 * time.Millisecond
	DefaultApplyTimeout       = 10 * time.Second
	DefaultSnapshotThreshold  = 8192
	DefaultSnapshotInterval   = 2 * time.Minute
	DefaultTrailingLogs       = 10240
	DefaultMaxWaitersPerKey   = 10000
	DefaultMaxSharedHolders   = 4096
	DefaultMaxWatchers        = 10000
	DefaultWatchBuffer        = 1024
	DefaultMaxSessions        = 100000
	DefaultMaxJoinHops        = 5
	// DefaultFormatPollInterval is how often the leader asks the voters
	// which formats they read, to raise the format gate (gate.go).
	DefaultFormatPollInterval = 2 * time.Second
)

// Config configures one raftlock server.
type Config struct {
	// ID is the Raft server id: unique in the cluster, stable across
	// restarts (e.g. "1").
	ID string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string
	// RaftAddr is where the Raft transport listens; peers dial it. Default
	// 127.0.0.1:8080+ID when ID is a number. Port 0 picks a free port.
	RaftAddr string
	// RaftAdvertise is the Raft address peers dial, when it differs from
	// RaftAddr: a wildcard bind (0.0.0.0:8081), NAT, a container network
	// where a name (raft1:8081) outlives the container's IP. It is this
	// node's address in the Raft configuration, so keep it stable across
	// restarts. Empty: the bound address, which must then be a specific
	// one.
	RaftAdvertise string
	// APIAddr is this node's client API address as clients should dial it
	// (the gateway and membership endpoints). It is replicated in the member
	// directory so that followers can redirect clients to the leader.
	// Default 127.0.0.1:50050+ID when ID is a number.
	APIAddr string
	// APIListen is where the API listens when that differs from the
	// address clients dial (APIAddr): behind a proxy or NAT. Empty: APIAddr.
	APIListen string
	// PeerDial maps a peer's Raft address to the address to dial instead
	// (a proxy between the two nodes: the chaos bench cuts links there).
	// Peers not in the map are dialled directly.
	PeerDial map[string]string
	// TLS, when not nil, makes the Raft transport and the API serve only
	// TLS, the membership RPCs use it, and peers authenticate each other
	// with certificates from the cluster CA (see TLS).
	TLS *TLS
	// InsecureNoPeerAuth lets a node without TLS use a Raft address that
	// is not loopback (--insecure-raft-no-peer-auth). Its Raft port then
	// processes any party's RPCs: whoever reaches it can rewrite the lock
	// table. Only for a network where every host is trusted.
	InsecureNoPeerAuth bool
	// AdminTokens, when not nil, are the bearer tokens that authorize join
	// and remove (--admin-tokens-file); a verified peer certificate (with
	// TLS) does too. See docs/security.md for the full rules.
	AdminTokens TokenSet
	// ClientTokens, when not nil, are the lock clients' bearer tokens
	// (--auth-tokens-file). They never authorize membership changes (403),
	// and their presence closes the loopback development mode, in which a
	// node with no admin credential accepts join and remove from anyone.
	ClientTokens TokenSet
	// MembershipToken, when not empty, is sent as a bearer token with the
	// membership RPCs this node makes (its own join, forwarded requests):
	// an admin token of the cluster.
	MembershipToken string
	// FaultInjection mounts POST /v1/debug/clock on the API, which shifts
	// this node's leader clock (Faults.SkewClock) by {"offsetMs": N}: the chaos
	// bench's clock-jump fault. Never enable it in production.
	FaultInjection bool
	// Bootstrap makes this node form a new single-node cluster if it has no
	// Raft state yet. Exactly one node of a new cluster bootstraps; the
	// others join it.
	Bootstrap bool
	// Store is the durable log and stable store (see docs/raftlock-store.md).
	// Default store.KindAuto: the kind DataDir already holds, raft-wal for
	// a new directory.
	Store store.Kind
	// Clock is the leader clock stamped into log entries. Default a
	// MonotonicClock.
	Clock Clock

	// Raft timing; see hashicorp/raft's Config.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// ApplyTimeout bounds how long a command may wait to be committed
	// when the caller's context has no earlier deadline.
	ApplyTimeout time.Duration

	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// FormatPollInterval is how often the leader asks every voter which
	// formats it reads (default DefaultFormatPollInterval).
	FormatPollInterval time.Duration
	// readsFormat, when not 0, caps the formats this node reads: tests'
	// stand-in for an older binary.
	readsFormat  uint8
	TrailingLogs uint64

	// MaxWaitersPerKey bounds each key's queue on the leader.
	MaxWaitersPerKey int

	// MaxSharedHolders bounds the shared holders (readers, semaphore
	// permits) of one key: past it, shared callers wait as if the key
	// were full (TryAcquire is refused). At most fsm.MaxHolders. Default
	// DefaultMaxSharedHolders.
	MaxSharedHolders int

	// MaxSessions bounds the sessions of the cluster (OpenSession returns
	// an error matching lock.ErrTooManySessions past it, checked on the
	// leader). Each session costs ~200 B on every node beside its leases,
	// and one entry per renewal interval. Default DefaultMaxSessions.
	MaxSessions int

	// MaxWatchers bounds the watches open on this node (Watch returns an
	// error matching lock.ErrUnavailable past it). Default
	// DefaultMaxWatchers.
	MaxWatchers int

	// WatchBuffer is how many events a watch may fall behind by before it
	// is dropped with lock.ErrWatchOverflow. Default DefaultWatchBuffer.
	WatchBuffer int

	// HTTPLimits are the API server's connection limits: timeouts and
	// caps on open connections (zero fields: netguard's defaults).
	HTTPLimits netguard.Limits

	// Logger receives the node's structured logs. Default slog.Default().
	Logger *slog.Logger
	// RaftLogOutput receives hashicorp/raft's own log (at warn level and
	// above). Default io.Discard.
	RaftLogOutput io.Writer
	// Audit, when not nil, receives the audit trail of what this node
	// decides (audit.go): expiries while it leads, force-releases,
	// membership changes, backups.
	Audit *audit.Log
}

// TokenSet is a set of bearer tokens (gateway.Tokens is one). Valid must
// take the same time whichever token, if any, matches.
type TokenSet interface {
	Valid(token string) bool
}

// ErrNoPeerAuth: a node without TLS on a Raft address other parties can
// reach, and no InsecureNoPeerAuth.
var ErrNoPeerAuth = errors.New("raftlock: the Raft transport would process any party's RPCs")

// checkPeerAuth refuses a node whose Raft port others could reach with
// nothing to tell members from strangers.
func (c *Config) checkPeerAuth() error {
	if c.TLS != nil {
		return c.TLS.validate()
	}
	if c.InsecureNoPeerAuth {
		return nil
	}
	for _, a := range []string{c.RaftAddr, c.RaftAdvertise} {
		if a != "" && !netguard.Loopback(a) {
			return fmt.Errorf("%w: Raft address %s is not loopback and the node has no TLS. "+
				"Add --tls-cert, --tls-key and --tls-ca (Config.TLS) so that peers prove membership with certificates, "+
				"or --insecure-raft-no-peer-auth (Config.InsecureNoPeerAuth) if every host that can reach it is trusted", ErrNoPeerAuth, a)
		}
	}
	return nil
}

// insecurePeers reports whether the Raft port is reachable by others and
// trusts them all (InsecureNoPeerAuth in use): worth a warning at start.
func (c *Config) insecurePeers() bool {
	return c.TLS == nil && c.InsecureNoPeerAuth && (!netguard.Loopback(c.RaftAddr) || c.RaftAdvertise != "" && !netguard.Loopback(c.RaftAdvertise))
}

// DefaultConfig returns a Config for server id with every default filled.
func DefaultConfig(id string) Config {
	c := Config{ID: id}
	c.fill()
	return c
}

func (c *Config) fill() {
	if n, err := strconv.Atoi(c.ID); err == nil && n >= 0 {
		if c.RaftAddr == "" {
			c.RaftAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultRaftPortBase+n))
		}
		if c.APIAddr == "" {
			c.APIAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultAPIPortBase+n))
		}
	}
	if c.Store == "" {
		c.Store = store.KindAuto
	}
	if c.Clock == nil {
		c.Clock = NewMonotonicClock()
	}
	if _, ok := c.Clock.(*skewClock); c.FaultInjection && !ok {
		c.Clock = &skewClock{base: c.Clock}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	def(&c.ElectionTimeout, DefaultElectionTimeout)
	def(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	def(&c.CommitTimeout, DefaultCommitTimeout)
	def(&c.ApplyTimeout, DefaultApplyTimeout)
	def(&c.SnapshotInterval, DefaultSnapshotInterval)
	def(&c.FormatPollInterval, DefaultFormatPollInterval)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.MaxWaitersPerKey == 0 {
		c.MaxWaitersPerKey = DefaultMaxWaitersPerKey
	}
	if c.MaxSharedHolders == 0 {
		c.MaxSharedHolders = DefaultMaxSharedHolders
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxWatchers == 0 {
		c.MaxWatchers = DefaultMaxWatchers
	}
	if c.WatchBuffer == 0 {
		c.WatchBuffer = DefaultWatchBuffer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RaftLogOutput == nil {
		c.RaftLogOutput = io.Discard
	}
}

// Validate reports the first invalid field, saying what is wrong.
func (c *Config) Validate() error {
	switch {
	case c.ID == "":
		return errors.New("raftlock: Config.ID is empty: every server needs a unique, stable id")
	case c.DataDir == "":
		return errors.New("raftlock: Config.DataDir is empty: the Raft log and snapshots need a directory")
	case c.RaftAddr == "":
		return fmt.Errorf("raftlock: Config.RaftAddr is empty and ID %q is not a number to derive port 8080+ID from", c.ID)
	case c.APIAddr == "":
		return fmt.Errorf("raftlock: Config.APIAddr is empty and ID %q is not a number to derive port 50050+ID from", c.ID)
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return fmt.Errorf("raftlock: Config.LeaderLeaseTimeout %v exceeds HeartbeatTimeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.MaxWaitersPerKey < 1:
		return fmt.Errorf("raftlock: Config.MaxWaitersPerKey %d: want at least 1", c.MaxWaitersPerKey)
	case c.MaxSharedHolders < 1 || c.MaxSharedHolders > fsm.MaxHolders:
		return fmt.Errorf("raftlock: Config.MaxSharedHolders %d: want 1..%d", c.MaxSharedHolders, fsm.MaxHolders)
	case c.MaxSessions < 1:
		return fmt.Errorf("raftlock: Config.MaxSessions %d: want at least 1", c.MaxSessions)
	case c.MaxWatchers < 1:
		return fmt.Errorf("raftlock: Config.MaxWatchers %d: want at least 1", c.MaxWatchers)
	case c.WatchBuffer < 1:
		return fmt.Errorf("raftlock: Config.WatchBuffer %d: want at least 1", c.WatchBuffer)
	}
	// Before the address checks: a wildcard bind without peer
	// authentication needs the peer-authentication flags first.
	if err := c.checkPeerAuth(); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(c.RaftAddr)
	if err != nil {
		return fmt.Errorf("raftlock: Config.RaftAddr %q: %w", c.RaftAddr, err)
	}
	if c.RaftAdvertise == "" {
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("raftlock: Config.RaftAddr %q binds every interface, which peers cannot dial: set RaftAdvertise (--raft-advertise) to the address they should use", c.RaftAddr)
		}
	} else {
		h, p, err := net.SplitHostPort(c.RaftAdvertise)
		if err != nil {
			return fmt.Errorf("raftlock: Config.RaftAdvertise %q: %w", c.RaftAdvertise, err)
		}
		if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("raftlock: Config.RaftAdvertise %q: want a host peers can dial, not a wildcard", c.RaftAdvertise)
		}
		if port, err := strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("raftlock: Config.RaftAdvertise %q: want a port from 1 to 65535", c.RaftAdvertise)
		}
	}
	if _, _, err := net.SplitHostPort(c.APIAddr); err != nil {
		return fmt.Errorf("raftlock: Config.APIAddr %q: %w", c.APIAddr, err)
	}
	return nil
}
