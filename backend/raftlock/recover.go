package raftlock

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/backend/raftlock/store"
)

// Recovery from a lost majority (`lockgate recover`, docs/operations.md).
//
// A cluster that has lost a majority of its voters for good cannot elect a
// leader: every change, including a change of membership, needs the
// quorum that is gone. RecoverDataDir rewrites the stopped data directory
// of one survivor with hashicorp/raft's RecoverCluster: the state its log
// and snapshots hold (committed or not) becomes a snapshot whose
// configuration is a new one given by the operator, by default this node
// alone, and the log is emptied. Started normally, the node then leads a
// cluster of one and grows again by the usual joins.
//
// What the lost members alone had is gone, and among it may be grants
// whose tokens clients still hold. So the snapshot's fencing counter is
// raised to fsm.TokenFloor (the greatest of the counter, the state
// machine's clock and the wall clock now, in nanoseconds, plus one) or to
// RecoverOptions.TokenFloor if higher: every later token is above every
// token the old cluster issued, under the clock assumption fsm/restore.go
// states. Leases the survivor knows are kept: their holders may still be
// alive, and the tokens they hold are below the floor like any other.

// Errors of RecoverDataDir, besides store.ErrLocked (a node runs on the
// directory) and store.ErrOtherKind.
var (
	// ErrNoState: the directory holds no Raft state to recover (missing,
	// empty, or never part of a cluster).
	ErrNoState = errors.New("raftlock: no Raft state to recover")
	// ErrNotMember: the id given is not in the configuration the
	// directory last knew, or not in the new configuration given.
	ErrNotMember = errors.New("raftlock: not a member")
)

// RecoverOptions says how RecoverDataDir rewrites a data directory.
type RecoverOptions struct {
	// ID is the server id of the node whose directory it is (required):
	// the --id it runs with.
	ID string
	// RaftAddr is this node's address in the new configuration, the one
	// peers dial (its RaftAdvertise when it has one). Default: its address
	// in the configuration the directory last knew.
	RaftAddr string
	// Members are the new configuration's voters, server id → Raft
	// address; this node is added when missing. Default: this node alone.
	// Every other member must start with an empty data directory and
	// receive the state from this node: two recovered directories in one
	// cluster would hold different fencing counters.
	Members map[string]string
	// Store is the store kind the node runs with (default store.KindAuto,
	// the kind the directory holds).
	Store store.Kind
	// TokenFloor, when above the computed floor, is the counter instead:
	// every token granted after the recovery is above it.
	TokenFloor uint64
	// Logger receives the steps taken. Default slog.Default().
	Logger *slog.Logger
	// RaftLogOutput receives hashicorp/raft's own log (warn and above).
	// Default io.Discard.
	RaftLogOutput io.Writer
}

// RecoverReport is what RecoverDataDir did.
type RecoverReport struct {
	DataDir string
	Store   store.Kind
	// LastIndex and LastTerm are the index and term of the snapshot
	// written: the last entry of the survivor's log, now its state.
	LastIndex, LastTerm uint64
	// SnapshotID names the snapshot written.
	SnapshotID string
	// CounterBefore is the fencing counter the survivor's state had (the
	// last token it knew of); CounterAfter is the counter now: the next
	// token granted is CounterAfter+1.
	CounterBefore, CounterAfter uint64
	// FSMNow is the state machine's clock (unix ns) in the survivor's
	// state.
	FSMNow int64
	// Leases is how many lease holders the state keeps (expired ones
	// included: the new leader expires them).
	Leases int
	// Previous is the configuration the directory last knew; Configuration
	// is the new one.
	Previous, Configuration raft.Configuration
	// DroppedMembers are the server ids removed from the member directory
	// (the API addresses) because the new configuration lacks them.
	DroppedMembers []string
}

// RecoverDataDir turns the data directory of a stopped node into the state
// of a new cluster whose configuration is opts.Members (by default this
// node alone), keeping everything the directory holds and raising the
// fencing counter above every token the old cluster may have granted. Use
// it only when a majority of the voters is lost for good; see
// docs/operations.md. It refuses, leaving it as it is, a directory a
// running node holds (an error matching store.ErrLocked), and one without
// state (ErrNoState). After it, start the node as usual on dir.
func RecoverDataDir(dir string, opts RecoverOptions) (*RecoverReport, error) {
	if opts.ID == "" {
		return nil, errors.New("raftlock: recover: the server id is required")
	}
	if opts.Store == "" {
		opts.Store = store.KindAuto
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RaftLogOutput == nil {
		opts.RaftLogOutput = io.Discard
	}
	// Every data directory a node has run on has its snapshot directory.
	// Checked before store.Open, which would create a log (and tighten
	// the modes) in any directory it is given: a mistyped path must be
	// left alone.
	if fi, err := os.Stat(filepath.Join(dir, snapshotDirName)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a raftlock data directory (it has no %s/)", ErrNoState, dir, snapshotDirName)
	}
	stores, err := store.Open(dir, opts.Store)
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("raftlock: recover: %w; stop the node first: recovery rewrites a stopped node's directory", err)
	}
	if err != nil {
		return nil, fmt.Errorf("raftlock: recover: %w", err)
	}
	defer stores.Close()
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: opts.RaftLogOutput})
	snaps, err := store.OpenSnapshots(filepath.Join(dir, snapshotDirName), hl)
	if err != nil {
		return nil, fmt.Errorf("raftlock: recover: %w", err)
	}
	has, err := raft.HasExistingState(stores.Log, stores.Stable, snaps)
	if err != nil {
		return nil, fmt.Errorf("raftlock: recover: reading existing state: %w", err)
	}
	if !has {
		return nil, fmt.Errorf("%w: %s holds no Raft log, term or snapshot", ErrNoState, dir)
	}
	prev, err := latestConfiguration(stores.Log, snaps)
	if err != nil {
		return nil, fmt.Errorf("raftlock: recover: %w", err)
	}
	conf, err := recoveryConfiguration(prev, opts)
	if err != nil {
		return nil, err
	}
	// As at a node's start (node.go): a corrupt newest snapshot is
	// replaced by an older one and the log, or refused by name;
	// RecoverCluster would skip it silently and start from an older one
	// whatever the log holds. A snapshot of a format this binary does not
	// read is not corrupt, and is refused.
	var unreadable error
	load := func(rc io.ReadCloser) error {
		err := fsm.New().Restore(rc)
		if errors.Is(err, fsm.ErrUnknownFormat) {
			unreadable = err
			return nil
		}
		return err
	}
	if err := snaps.Recover(stores.Log, load, hl); err != nil {
		return nil, fmt.Errorf("raftlock: recover: %w", err)
	}
	if unreadable != nil {
		return nil, fmt.Errorf("raftlock: recover: %w; run a binary that reads it on this data directory", unreadable)
	}

	rep := &RecoverReport{DataDir: dir, Store: stores.Kind, Previous: prev, Configuration: conf}
	keep := map[string]bool{}
	for _, s := range conf.Servers {
		keep[string(s.ID)] = true
	}
	f := &recoveringFSM{FSM: fsm.New(), rep: rep, keep: keep, floor: func(counter uint64, fsmNow int64) uint64 {
		return max(fsm.TokenFloor(time.Now(), counter, fsmNow), opts.TokenFloor)
	}}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(opts.ID)
	rc.Logger = hl
	rc.NoLegacyTelemetry = true
	// The transport only encodes the configuration's addresses into the
	// snapshot's metadata: nothing is sent.
	_, trans := raft.NewInmemTransport(conf.Servers[0].Address)
	defer trans.Close()
	if err := raft.RecoverCluster(rc, f, stores.Log, stores.Stable, snaps, trans, conf); err != nil {
		return nil, fmt.Errorf("raftlock: recover: %w", err)
	}
	if !f.snapshotted {
		return nil, errors.New("raftlock: recover: raft wrote no snapshot")
	}
	metas, err := snaps.List()
	if err != nil {
		return nil, fmt.Errorf("raftlock: recover: listing the snapshot written: %w", err)
	}
	if len(metas) == 0 {
		return nil, errors.New("raftlock: recover: the snapshot written is not listed")
	}
	rep.LastIndex, rep.LastTerm, rep.SnapshotID = metas[0].Index, metas[0].Term, metas[0].ID
	if err := stores.Close(); err != nil {
		return nil, fmt.Errorf("raftlock: recover: closing the store: %w", err)
	}
	opts.Logger.Info("recovered a data directory into a new configuration", "data_dir", dir, "id", opts.ID,
		"last_index", rep.LastIndex, "last_term", rep.LastTerm, "counter_before", rep.CounterBefore,
		"counter_after", rep.CounterAfter, "configuration", FormatConfiguration(conf))
	return rep, nil
}

// recoveryConfiguration builds the new configuration from opts, checked
// against prev, the one the directory last knew: this node must be in
// both, at an address peers can dial.
func recoveryConfiguration(prev raft.Configuration, opts RecoverOptions) (raft.Configuration, error) {
	if len(prev.Servers) == 0 {
		return raft.Configuration{}, fmt.Errorf("%w: the data directory knows no cluster configuration: it never received a cluster's state", ErrNoState)
	}
	var oldAddr raft.ServerAddress
	for _, s := range prev.Servers {
		if string(s.ID) == opts.ID {
			oldAddr = s.Address
		}
	}
	if oldAddr == "" {
		return raft.Configuration{}, fmt.Errorf("%w: server id %q is not in the configuration this data directory last knew (%s): check the id",
			ErrNotMember, opts.ID, FormatConfiguration(prev))
	}
	self := opts.RaftAddr
	if a, ok := opts.Members[opts.ID]; ok {
		if self != "" && a != self {
			return raft.Configuration{}, fmt.Errorf("raftlock: recover: the members give server %s the address %s and the Raft address given is %s", opts.ID, a, self)
		}
		self = a
	}
	if self == "" {
		self = string(oldAddr)
	}
	members := map[string]string{opts.ID: self}
	for id, addr := range opts.Members {
		members[id] = addr
	}
	var conf raft.Configuration
	for id, addr := range members {
		if id == "" {
			return raft.Configuration{}, errors.New("raftlock: recover: a member has an empty server id")
		}
		if err := dialable(addr); err != nil {
			return raft.Configuration{}, fmt.Errorf("raftlock: recover: member %s: %w", id, err)
		}
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	slices.SortFunc(conf.Servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	for i := 1; i < len(conf.Servers); i++ {
		if conf.Servers[i].Address == conf.Servers[i-1].Address {
			return raft.Configuration{}, fmt.Errorf("raftlock: recover: servers %s and %s have the same address %s",
				conf.Servers[i-1].ID, conf.Servers[i].ID, conf.Servers[i].Address)
		}
	}
	return conf, nil
}

// dialable checks that addr is a host:port peers can dial: not a wildcard
// bind address.
func dialable(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("the Raft address %q: want host:port", addr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("the Raft address %q is a wildcard that peers cannot dial: give the address they dial (the node's --raft-advertise)", addr)
	}
	return nil
}

// latestConfiguration returns the newest configuration in snaps and logs:
// the last configuration entry after the newest snapshot, else the
// snapshot's. Like raft, it counts entries whether or not they committed.
func latestConfiguration(logs raft.LogStore, snaps raft.SnapshotStore) (conf raft.Configuration, err error) {
	metas, err := snaps.List()
	if err != nil {
		return conf, fmt.Errorf("listing snapshots: %w", err)
	}
	var from uint64
	if len(metas) > 0 {
		conf, from = metas[0].Configuration, metas[0].Index+1
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return conf, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return conf, err
	}
	defer func() {
		// raft.DecodeConfiguration panics on bytes it cannot decode.
		if p := recover(); p != nil {
			err = fmt.Errorf("reading the configuration in the log: %v", p)
		}
	}()
	for i := max(from, first); i <= last && i > 0; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return conf, fmt.Errorf("log entry %d: %w", i, err)
		}
		if l.Type == raft.LogConfiguration {
			conf = raft.DecodeConfiguration(l.Data)
		}
	}
	return conf, nil
}

// FormatConfiguration writes a configuration as "id=address,…", each
// non-voter marked "(nonvoter)".
func FormatConfiguration(c raft.Configuration) string {
	parts := make([]string, 0, len(c.Servers))
	for _, s := range c.Servers {
		p := string(s.ID) + "=" + string(s.Address)
		if s.Suffrage != raft.Voter {
			p += " (nonvoter)"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}

// recoveringFSM is the state machine RecoverCluster replays the survivor's
// state into. Its Snapshot, which RecoverCluster calls once after the
// replay to write the new cluster's first snapshot, raises the fencing
// counter to the floor and drops the lost members from the member
// directory first.
type recoveringFSM struct {
	*fsm.FSM
	rep         *RecoverReport
	keep        map[string]bool
	floor       func(counter uint64, fsmNow int64) uint64
	snapshotted bool
}

func (r *recoveringFSM) Snapshot() (raft.FSMSnapshot, error) {
	// A state machine that met an entry it cannot read holds a prefix
	// of the state: refuse before raft writes it and empties the log.
	if err := r.Halted(); err != nil {
		return nil, fmt.Errorf("the state machine stopped replaying the log: %w", err)
	}
	r.rep.CounterBefore, r.rep.FSMNow = r.LastToken(), r.Now()
	r.RaiseCounter(r.floor(r.rep.CounterBefore, r.rep.FSMNow))
	r.rep.CounterAfter = r.LastToken()
	r.rep.Leases = r.NumLocks()
	members := r.Members()
	for id := range members {
		if !r.keep[id] {
			delete(members, id)
			r.rep.DroppedMembers = append(r.rep.DroppedMembers, id)
		}
	}
	slices.Sort(r.rep.DroppedMembers)
	r.SetMembers(members)
	r.snapshotted = true
	return r.FSM.Snapshot()
}
