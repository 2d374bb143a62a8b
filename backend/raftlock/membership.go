package raftlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/internal/crossorigin"
	"github.com/lockgate/lockgate/internal/netguard"
)

// Membership (the design's Join Cluster, Fetch Peer List and Remove Server
// RPCs) over HTTP+JSON on each node's API address. Any member accepts a
// join or remove and forwards it to the leader, following at most
// DefaultMaxJoinHops redirects; the change itself is a Raft configuration
// change (AddVoter / RemoveServer), replicated and committed by a quorum.

// HTTP paths of the membership API.
const (
	PathPeers  = "/v1/cluster/peers"
	PathJoin   = "/v1/cluster/join"
	PathRemove = "/v1/cluster/remove"
	// PathSnapshot takes a snapshot of this node now (admin credential,
	// as join and remove): operators before a backup or an upgrade, and
	// `lockgate-bench scale` to time one.
	PathSnapshot = "/v1/cluster/snapshot"
	// PathGC runs a garbage collection and answers the live heap (admin
	// credential): to measure what the lock table costs in memory
	// (`lockgate-bench scale`), without waiting for the collector.
	PathGC     = "/v1/debug/gc"
	hopsHeader = "X-Lockgate-Hops"
)

// JoinArgs asks the cluster to add a server (seed: JoinClusterArgs).
type JoinArgs struct {
	ServerID   string `json:"serverId"`
	ServerAddr string `json:"serverAddr"` // its Raft address
	APIAddr    string `json:"apiAddr"`    // its client API address
	// Reads is the highest entry and snapshot format the server reads
	// (0: it did not say, as binaries that predate the format gate: 1).
	// The leader refuses a server that reads less than the cluster
	// writes.
	Reads uint8 `json:"reads,omitempty"`
}

// Validate checks a join request before anything changes: the Raft
// configuration takes the new voter before its API address is recorded in
// the state machine, so a server id or address the state machine would
// refuse must be refused here, or the cluster would gain a voter it cannot
// describe.
func (a JoinArgs) Validate() error {
	if a.ServerID == "" || a.ServerAddr == "" || a.APIAddr == "" {
		return errors.New("serverId, serverAddr and apiAddr are required")
	}
	if err := (fsm.Op{Type: fsm.OpSetMember, Key: a.ServerID, Value: []byte(a.APIAddr)}).Validate(); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	for _, f := range []struct{ name, v string }{{"serverId", a.ServerID}, {"serverAddr", a.ServerAddr}, {"apiAddr", a.APIAddr}} {
		if len(f.v) > maxMemberField || !utf8.ValidString(f.v) || strings.IndexFunc(f.v, unicode.IsControl) >= 0 {
			return fmt.Errorf("%s: want at most %d bytes of UTF-8 without control characters", f.name, maxMemberField)
		}
	}
	for _, f := range []struct{ name, v string }{{"serverAddr", a.ServerAddr}, {"apiAddr", a.APIAddr}} {
		if _, _, err := net.SplitHostPort(f.v); err != nil {
			return fmt.Errorf("%s %q: want host:port: %w", f.name, f.v, err)
		}
	}
	return nil
}

// maxMemberField bounds a join request's server id and addresses.
const maxMemberField = 256

// RemoveArgs asks the cluster to remove a server.
type RemoveArgs struct {
	ServerID string `json:"serverId"`
}

// Reply answers join and remove (seed: JoinClusterReply).
type Reply struct {
	Success    bool   `json:"success"`
	LeaderID   string `json:"leaderId,omitempty"`
	LeaderAddr string `json:"leaderAddr,omitempty"` // the leader's API address
	Term       uint64 `json:"term"`
	Error      string `json:"error,omitempty"`
}

// PeerList is the cluster as one member sees it (seed: FetchPeerListReply).
type PeerList struct {
	Success     bool              `json:"success"`
	Term        uint64            `json:"term"`
	LeaderID    string            `json:"leaderId"`
	LeaderAddr  string            `json:"leaderAddr"` // API address
	AnsweredBy  string            `json:"answeredBy"`
	PeerAddress map[string]string `json:"peerAddress"` // id → Raft address
	APIAddress  map[string]string `json:"apiAddress"`  // id → API address
	Voters      []string          `json:"voters"`
}

// Handler serves the membership API. `lockgate node` mounts it on the API
// address; the gateway serves it beside the lock endpoints.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathPeers, n.handlePeers)
	mux.HandleFunc("POST "+PathJoin, n.handleJoin)
	mux.HandleFunc("POST "+PathRemove, n.handleRemove)
	mux.HandleFunc("POST "+PathSnapshot, n.handleSnapshot)
	mux.HandleFunc("GET "+PathBackup, n.handleBackup)
	mux.HandleFunc("POST "+PathGC, n.handleGC)
	mux.HandleFunc("GET "+PathStatus, n.handleStatus)
	mux.HandleFunc("GET "+PathFormat, n.handleFormatGet)
	mux.HandleFunc("POST "+PathFormat, n.handleFormatPost)
	mux.HandleFunc("GET "+PathIdentities, n.handleIdentities)
	mux.HandleFunc("POST "+PathIdentityCloser, n.handleCloseIdentity)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !n.sameSite(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// sameSite refuses, before any credential is looked at, a request that
// changes state (join, remove, snapshot, gc, format) and could come from
// a browser page of another origin: one with a body not typed
// application/json (415), or with a foreign Origin (403; docs/security.md,
// "Cross-site requests"). A page could otherwise make the browser of
// anyone who reaches an open loopback node remove a member with a plain
// form. No origin but the node's own is allowed: no page needs these
// endpoints. It reports whether r may go on.
func (n *Node) sameSite(w http.ResponseWriter, r *http.Request) bool {
	ref := crossorigin.Check(r, nil)
	if ref == nil {
		return true
	}
	n.log.Warn("cross-site membership request refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path,
		"status", ref.Status, "origin", r.Header.Get("Origin"), "content_type", r.Header.Get("Content-Type"))
	writeJSON(w, ref.Status, Reply{Error: ref.Code + ": " + ref.Message})
	return false
}

func (n *Node) term() uint64 {
	t, _ := strconv.ParseUint(n.raft.Stats()["term"], 10, 64)
	return t
}

// Peers returns the cluster configuration as this node knows it.
func (n *Node) Peers() (*PeerList, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, n.raftErr(err)
	}
	lid, laddr := n.Leader()
	pl := &PeerList{
		Success: lid != "", Term: n.term(), LeaderID: lid, LeaderAddr: laddr, AnsweredBy: n.cfg.ID,
		PeerAddress: map[string]string{}, APIAddress: n.fsm.Members(),
	}
	for _, s := range f.Configuration().Servers {
		pl.PeerAddress[string(s.ID)] = string(s.Address)
		if s.Suffrage == raft.Voter {
			pl.Voters = append(pl.Voters, string(s.ID))
		}
	}
	return pl, nil
}

func (n *Node) handlePeers(w http.ResponseWriter, r *http.Request) {
	pl, err := n.Peers()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Reply{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, pl)
}

// authorized reports whether r may change the membership, answering 401
// or 403 itself when not (membershipPolicy.decide has the rules).
func (n *Node) authorized(w http.ResponseWriter, r *http.Request) bool {
	code, msg := n.membershipPolicy().decide(r)
	if code == 0 {
		return true
	}
	n.log.Warn("membership change refused", "remote", r.RemoteAddr, "path", r.URL.Path, "status", code, "reason", msg)
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockgate"`)
	}
	writeJSON(w, code, Reply{Error: msg})
	return false
}

func (n *Node) membershipPolicy() membershipPolicy {
	listen := n.cfg.APIListen
	if listen == "" {
		listen = n.cfg.APIAddr
	}
	return membershipPolicy{admin: n.cfg.AdminTokens, client: n.cfg.ClientTokens,
		peerAuth: n.cfg.TLS.PeerAuth(), loopbackAPI: netguard.Loopback(listen)}
}

// membershipPolicy is what a node knows to authorize join and remove.
type membershipPolicy struct {
	admin, client TokenSet // nil: not configured
	peerAuth      bool     // TLS: peers hold certificates from the cluster CA
	loopbackAPI   bool     // the API listens on loopback only
}

// Refusals of membership requests.
const (
	msgHowToAdmin    = "present an admin bearer token (the node's --admin-tokens-file) or a client certificate from the cluster CA (nodes with --tls-cert, --tls-key, --tls-ca)"
	msgNoAdminConfig = "membership changes are closed: this node has no admin credential configured and its API is not loopback-only development; " +
		"start the nodes with --admin-tokens-file or with TLS peer authentication (--tls-cert, --tls-key, --tls-ca)"
)

// decide returns 0 when r may change the membership, else the status
// (401: no or unknown credential; 403: a credential that does not
// authorize membership, or membership closed) and a message saying what
// is needed:
//
//   - a client certificate verified against the cluster CA: allowed;
//   - a valid admin token: allowed;
//   - no admin credential configured at all (no admin tokens, no TLS):
//     allowed only when the API listens on loopback and no client tokens
//     are configured (development), else 403;
//   - a client token: 403; no credential or an unknown token: 401.
func (p membershipPolicy) decide(r *http.Request) (int, string) {
	if p.peerAuth && peerVerified(r) {
		return 0, ""
	}
	tok, hasTok := bearerToken(r)
	if hasTok && p.admin != nil && p.admin.Valid(tok) {
		return 0, ""
	}
	if p.admin == nil && !p.peerAuth {
		if p.loopbackAPI && p.client == nil {
			return 0, ""
		}
		return http.StatusForbidden, msgNoAdminConfig
	}
	if hasTok && p.client != nil && p.client.Valid(tok) {
		return http.StatusForbidden, "a client token does not authorize membership changes: " + msgHowToAdmin
	}
	if hasTok {
		return http.StatusUnauthorized, "unknown bearer token: " + msgHowToAdmin
	}
	return http.StatusUnauthorized, "no credential: " + msgHowToAdmin
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header.
func bearerToken(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

func (n *Node) handleJoin(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	var a JoinArgs
	if !readJSON(w, r, &a) {
		return
	}
	if err := a.Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, Reply{Error: err.Error()})
		return
	}
	n.leaderOnly(w, r, a, func() error {
		err := n.addVoter(r.Context(), a)
		n.auditMembership(r, audit.OpMemberAdd, a.ServerID, err)
		return err
	})
}

// SnapshotReply answers POST /v1/cluster/snapshot.
type SnapshotReply struct {
	Index   uint64  `json:"index"`   // the log index the snapshot covers
	Seconds float64 `json:"seconds"` // from the state machine's copy to the persisted file
	Error   string  `json:"error,omitempty"`
}

func (n *Node) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	f := n.raft.Snapshot()
	if err := f.Error(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, SnapshotReply{Error: err.Error()})
		return
	}
	idx := uint64(0)
	if meta, rc, err := f.Open(); err == nil {
		idx = meta.Index
		rc.Close()
	}
	writeJSON(w, http.StatusOK, SnapshotReply{Index: idx, Seconds: time.Duration(n.snapshotNanos.Load()).Seconds()})
}

// GCReply answers POST /v1/debug/gc: the heap right after a collection.
type GCReply struct {
	HeapAllocBytes uint64  `json:"heap_alloc_bytes"` // live heap
	HeapInuseBytes uint64  `json:"heap_inuse_bytes"`
	Seconds        float64 `json:"seconds"` // the collection's wall time
}

func (n *Node) handleGC(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	start := time.Now()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	n.log.Info("garbage collection on request", "heap_alloc_bytes", m.HeapAlloc, "took", time.Since(start))
	writeJSON(w, http.StatusOK, GCReply{HeapAllocBytes: m.HeapAlloc, HeapInuseBytes: m.HeapInuse, Seconds: time.Since(start).Seconds()})
}

func (n *Node) handleRemove(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	var a RemoveArgs
	if !readJSON(w, r, &a) {
		return
	}
	if a.ServerID == "" {
		writeJSON(w, http.StatusBadRequest, Reply{Error: "serverId is required"})
		return
	}
	n.leaderOnly(w, r, a, func() error {
		err := n.removeServer(r.Context(), a.ServerID)
		n.auditMembership(r, audit.OpMemberRemove, a.ServerID, err)
		return err
	})
}

// leaderOnly runs change on the leader, or forwards the request there.
func (n *Node) leaderOnly(w http.ResponseWriter, r *http.Request, body any, change func() error) {
	if n.raft.State() == raft.Leader {
		if err := change(); err != nil {
			writeJSON(w, http.StatusConflict, Reply{Error: err.Error(), Term: n.term()})
			return
		}
		writeJSON(w, http.StatusOK, Reply{Success: true, LeaderID: n.cfg.ID, LeaderAddr: n.cfg.APIAddr, Term: n.term()})
		return
	}
	hops, _ := strconv.Atoi(r.Header.Get(hopsHeader))
	lid, laddr := n.Leader()
	if laddr == "" || hops+1 >= DefaultMaxJoinHops {
		writeJSON(w, http.StatusServiceUnavailable, Reply{LeaderID: lid, LeaderAddr: laddr, Term: n.term(),
			Error: fmt.Sprintf("no leader reachable from node %s after %d hops", n.cfg.ID, hops+1)})
		return
	}
	var rep Reply
	code, err := n.members.postJSON(r.Context(), laddr, r.URL.Path, hops+1, body, &rep)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, Reply{LeaderID: lid, LeaderAddr: laddr, Error: "forwarding to the leader: " + err.Error()})
		return
	}
	writeJSON(w, code, rep)
}

func (n *Node) addVoter(ctx context.Context, a JoinArgs) error {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(a.ServerID) && s.Address == raft.ServerAddress(a.ServerAddr) {
			return n.setMember(ctx, a.ServerID, a.APIAddr) // already a member: idempotent
		}
	}
	reads := a.Reads
	if reads == 0 {
		// A join sent on the server's behalf (an operator's tool) does
		// not say: ask the server itself, as the gate's monitor would.
		if st, err := n.members.fetchStatus(ctx, a.APIAddr); err == nil && st.Formats != nil {
			reads = min(st.Formats.Entry, st.Formats.Snapshot)
		}
	}
	if g, reads := n.fsm.Gate(), max(reads, 1); reads < g.Format {
		return fmt.Errorf("raftlock: server %s reads formats up to %d and the cluster writes format %d: "+
			"it would stop at the first entry it cannot read; run a newer binary on it, or lower the cluster's format first (lockgate format downgrade --to %d)",
			a.ServerID, reads, g.Format, reads)
	}
	if err := n.await(n.raft.AddVoter(raft.ServerID(a.ServerID), raft.ServerAddress(a.ServerAddr), 0, n.timeout(ctx)), 0); err != nil {
		return n.writeErr(err)
	}
	n.log.Info("server joined", "id", a.ServerID, "raft_addr", a.ServerAddr, "api_addr", a.APIAddr)
	return n.setMember(ctx, a.ServerID, a.APIAddr)
}

func (n *Node) setMember(ctx context.Context, id, apiAddr string) error {
	_, err := n.applyCtx(ctx, fsm.Op{Type: fsm.OpSetMember, Key: id, Value: []byte(apiAddr)})
	return err
}

func (n *Node) removeServer(ctx context.Context, id string) error {
	if err := n.await(n.raft.RemoveServer(raft.ServerID(id), 0, n.timeout(ctx)), 0); err != nil {
		return n.writeErr(err)
	}
	n.log.Info("server removed", "id", id)
	if id == n.cfg.ID {
		return nil // a leader that removed itself steps down; the next leader keeps the directory
	}
	_, err := n.applyCtx(ctx, fsm.Op{Type: fsm.OpRemoveMember, Key: id})
	return err
}

// maxRequestBody bounds the body of a membership request.
const maxRequestBody = 1 << 16

// readJSON decodes r's body, which must be one JSON object sent as
// Content-Type: application/json, into v, refusing unknown fields and
// anything after the object; it answers 415, 413 or 400 itself and reports
// false. (A json.Decoder alone stops after the first value: a body with
// more behind its object passed.)
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, Reply{Error: "unsupported_media_type: send the body as Content-Type: application/json"})
		return false
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, Reply{Error: fmt.Sprintf("the body exceeds %d bytes", tooBig.Limit)})
		} else {
			writeJSON(w, http.StatusBadRequest, Reply{Error: "reading the body: " + err.Error()})
		}
		return false
	}
	if err := crossorigin.DecodeObject(data, v); err != nil {
		writeJSON(w, http.StatusBadRequest, Reply{Error: "malformed JSON body: " + err.Error()})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
