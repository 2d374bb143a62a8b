package raftlock

// Taking a backup: on the leader (Node.Backup), over its HTTP endpoint
// (PathBackup), and from a client that finds the leader
// (MembershipClient.Backup).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/lock"
)

// PathBackup is the leader's backup endpoint: GET answers a backup file
// (an admin credential, as join and remove). A follower answers 421 with
// a Reply naming the leader (503 when it knows none); the client follows.
const PathBackup = "/v1/cluster/backup"

// backupWriteTimeout bounds the writing of a backup answer: the server's
// write timeout is sized for short answers, a backup may be large.
const backupWriteTimeout = 10 * time.Minute

// Backup takes a backup of the cluster's state on this node, which must
// be the leader: it checks that a quorum still follows it
// (VerifyLeader), waits until every entry committed before is applied
// (Barrier), snapshots the state machine, and returns the backup file
// and its header. A follower gets a *lock.NotLeaderError.
func (n *Node) Backup(ctx context.Context) ([]byte, *BackupHeader, error) {
	start := time.Now()
	if err := n.fsm.Halted(); err != nil {
		return nil, nil, fmt.Errorf("raftlock: backup: %w", err)
	}
	if err := n.verifyLeader(); err != nil {
		return nil, nil, err
	}
	if err := n.await(n.raft.Barrier(n.timeout(ctx)), 0); err != nil {
		return nil, nil, n.raftErr(err)
	}
	snap, err := persist(n.fsm)
	if err != nil {
		return nil, nil, fmt.Errorf("raftlock: backup: %w", err)
	}
	scratch := fsm.New()
	if err := scratch.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		return nil, nil, fmt.Errorf("raftlock: backup: the snapshot does not decode: %w", err)
	}
	st, err := describeState(scratch, snap)
	if err != nil {
		return nil, nil, fmt.Errorf("raftlock: backup: %w", err)
	}
	h := BackupHeader{BackupState: st, LeaderID: n.cfg.ID, Term: n.term(), Taken: time.Now().UTC()}
	h.Seconds = time.Since(start).Seconds()
	file, err := encodeBackup(h, snap)
	if err != nil {
		return nil, nil, err
	}
	return file, &h, nil
}

func (n *Node) handleBackup(w http.ResponseWriter, r *http.Request) {
	if !n.authorized(w, r) {
		return
	}
	redirect := func(why string) {
		lid, laddr := n.Leader()
		switch {
		case lid == n.cfg.ID:
			writeJSON(w, http.StatusServiceUnavailable, Reply{LeaderID: lid, LeaderAddr: laddr, Term: n.term(),
				Error: fmt.Sprintf("node %s is taking over as leader (%s): retry in a moment", n.cfg.ID, why)})
		case laddr == "":
			writeJSON(w, http.StatusServiceUnavailable, Reply{LeaderID: lid, Term: n.term(),
				Error: fmt.Sprintf("node %s is not the leader and knows none: %s", n.cfg.ID, why)})
		default:
			writeJSON(w, http.StatusMisdirectedRequest, Reply{LeaderID: lid, LeaderAddr: laddr, Term: n.term(),
				Error: fmt.Sprintf("node %s is not the leader: ask the leader, node %s at %s", n.cfg.ID, lid, laddr)})
		}
	}
	if !n.IsLeader() {
		redirect("not the ready leader")
		return
	}
	if !n.backupMu.TryLock() {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusTooManyRequests, Reply{Term: n.term(), Error: "a backup is being taken on this node: one at a time; retry when it is done"})
		return
	}
	data, h, err := n.Backup(r.Context())
	n.backupMu.Unlock()
	if errors.Is(err, lock.ErrNotLeader) {
		redirect(err.Error())
		return
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, Reply{Term: n.term(), Error: err.Error()})
		return
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(backupWriteTimeout))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="lockgate-%d.backup"`, h.AppliedIndex))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(data); err != nil {
		n.log.Warn("backup not delivered", "remote", r.RemoteAddr, "err", err)
		return
	}
	n.log.Info("backup taken", "remote", r.RemoteAddr, "bytes", len(data), "applied_index", h.AppliedIndex,
		"fencing_counter", h.FencingCounter, "leases", h.Leases, "took", time.Duration(h.Seconds*float64(time.Second)))
	cred, _ := n.Credential(r)
	n.audit(audit.Event{Op: audit.OpSnapshot, Identity: cred.Identity, Remote: r.RemoteAddr, FencingToken: h.FencingCounter,
		Detail: fmt.Sprintf("backup at log index %d, %d leases", h.AppliedIndex, h.Leases)})
}

// finalError is an answer every endpoint would give too (a refused
// credential), or a transfer that already wrote to the caller: Backup
// tries no other endpoint after it.
type finalError struct{ error }

func (e finalError) Unwrap() error { return e.error }

// Backup asks the cluster reachable at any of endpoints (API addresses)
// for a backup (GET PathBackup, with mc's admin token or certificate),
// following a follower's answer to the leader (at most DefaultMaxJoinHops
// hops per endpoint), and copies it to w. It returns the API address that
// sent it. w is written only once a leader answered 200; the caller
// verifies what it got (ParseBackup). The transfer is bounded by ctx, not
// by mc.Timeout.
func (mc *MembershipClient) Backup(ctx context.Context, endpoints []string, w io.Writer) (string, error) {
	var errs []error
	for _, addr := range endpoints {
		for hop := 0; hop < DefaultMaxJoinHops && addr != ""; hop++ {
			next, err := mc.backupFrom(ctx, addr, w)
			if err == nil {
				return addr, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			if fe := (finalError{}); errors.As(err, &fe) || ctx.Err() != nil {
				return "", fmt.Errorf("raftlock: backup: %w", errors.Join(errs...))
			}
			if next == addr {
				break
			}
			addr = next
		}
	}
	return "", fmt.Errorf("raftlock: backup: no leader answered: %w", errors.Join(errs...))
}

// backupFrom asks the node at addr; next is the leader it names when it
// is not the leader.
func (mc *MembershipClient) backupFrom(ctx context.Context, addr string, w io.Writer) (next string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, mc.url(addr, PathBackup), nil)
	if err != nil {
		return "", err
	}
	mc.authorize(req)
	hc := &http.Client{Transport: mc.http().Transport} // no Timeout: ctx bounds a large transfer
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var rep Reply
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &rep) == nil && rep.Error != "" {
			msg = rep.Error
		}
		err := fmt.Errorf("%s: %s", resp.Status, msg)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			err = finalError{err}
		}
		return rep.LeaderAddr, err
	}
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("%d of %d bytes", n, resp.ContentLength)
	}
	if err != nil {
		return "", finalError{fmt.Errorf("transfer cut short: %w", err)}
	}
	return "", nil
}
