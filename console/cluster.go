package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/lockgate/lockgate/internal/nodeview"
	"github.com/lockgate/lockgate/internal/wire"
)

type whoamiReply struct {
	Node       string `json:"node"`
	Admin      bool   `json:"admin"`
	Credential string `json:"credential"`
}

func (c *Console) whoami(w http.ResponseWriter, r *http.Request) {
	cred, ok := c.authorize(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, whoamiReply{Node: c.n.ID(), Admin: cred.Admin, Credential: cred.Kind})
}

// memberView is one member in the cluster view.
type memberView struct {
	nodeview.Status
	Voter      bool   `json:"voter"`
	LagEntries int64  `json:"lagEntries"`
	Lagging    bool   `json:"lagging"`
	Error      string `json:"error"`
}

type clusterReply struct {
	Node       string       `json:"node"`
	LeaderID   string       `json:"leaderId"`
	LeaderAddr string       `json:"leaderAddr"`
	Term       uint64       `json:"term"`
	Nodes      []memberView `json:"nodes"`
}

func (c *Console) cluster(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r); !ok {
		return
	}
	pl, err := c.n.MembersView()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error())
		return
	}
	self := c.n.StatusView()
	rep := clusterReply{Node: c.n.ID(), LeaderID: pl.LeaderID, LeaderAddr: pl.LeaderAddr, Term: pl.Term}
	ids := make([]string, 0, len(pl.RaftAddr))
	for id := range pl.RaftAddr {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rep.Nodes = make([]memberView, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		m := &rep.Nodes[i]
		m.ID, m.RaftAddr, m.APIAddr = id, pl.RaftAddr[id], pl.APIAddr[id]
		m.Voter = slices.Contains(pl.Voters, id)
		if id == self.ID {
			m.Status = self
			continue
		}
		wg.Go(func() {
			st, err := c.memberStatus(r, m.APIAddr)
			if err != nil {
				m.State, m.Error = "unreachable", err.Error()
				return
			}
			st.RaftAddr = m.RaftAddr
			m.Status = st
		})
	}
	wg.Wait()
	var leaderCommit uint64
	for _, m := range rep.Nodes {
		if m.ID == rep.LeaderID && m.Error == "" {
			leaderCommit = m.CommitIndex
		}
	}
	for i := range rep.Nodes {
		m := &rep.Nodes[i]
		if m.Error != "" {
			m.Lagging = true
			continue
		}
		if leaderCommit > 0 {
			m.LagEntries = int64(leaderCommit) - int64(m.AppliedIndex)
		}
		m.Lagging = m.LagEntries > LagEntries ||
			(m.State != "leader" && (m.LastContactMs < 0 || time.Duration(m.LastContactMs)*time.Millisecond > LagContact))
	}
	writeJSON(w, http.StatusOK, rep)
}

// memberStatus asks the member at apiAddr for its own status, with the
// caller's credential (a member checks it as this node does).
func (c *Console) memberStatus(r *http.Request, apiAddr string) (nodeview.Status, error) {
	if apiAddr == "" {
		return nodeview.Status{}, errors.New("no API address known")
	}
	return askMember[nodeview.Status](c, r, apiAddr, nodeview.PathStatus, 64<<10)
}

// askMember GETs path from the member at apiAddr with the caller's
// credential, within FanOutTimeout, and decodes at most limit bytes of its
// JSON answer.
func askMember[T any](c *Console, r *http.Request, apiAddr, path string, limit int64) (T, error) {
	var v T
	ctx, cancel := context.WithTimeout(r.Context(), FanOutTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.n.APIScheme()+"://"+apiAddr+path, nil)
	if err != nil {
		return v, err
	}
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return v, fmt.Errorf("%s answered %s", apiAddr, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, limit)).Decode(&v); err != nil {
		return v, fmt.Errorf("%s: %w", apiAddr, err)
	}
	return v, nil
}

// holderJSON and lockJSON are the JSON of a node's nodeview.Holder and
// nodeview.Lock.
type holderJSON struct {
	Owner       string `json:"owner"`
	Token       string `json:"token"`
	ExpiresInMs int64  `json:"expiresInMs"`
	Value       string `json:"value"`
}
