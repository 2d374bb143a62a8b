package raftlock

// The client side of the membership API: MembershipClient and the
// package-level Join, Remove and FetchPeers, which find the leader by
// following redirects.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// MembershipClient sends membership RPCs (join, remove, peer list) to a
// cluster's API addresses. The zero value speaks plain HTTP.
type MembershipClient struct {
	// TLS, when not nil, makes the client speak HTTPS with this
	// configuration (a node uses its TLS.ClientConfig: peers' certificates
	// verified, its own presented).
	TLS *tls.Config
	// Token, when not empty, is sent as "Authorization: Bearer <token>".
	Token string
	// Timeout bounds one RPC. Default 15 s.
	Timeout time.Duration

	once sync.Once
	hc   *http.Client
}

func (mc *MembershipClient) http() *http.Client {
	mc.once.Do(func() {
		to := mc.Timeout
		if to <= 0 {
			to = 15 * time.Second
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = mc.TLS
		mc.hc = &http.Client{Timeout: to, Transport: tr}
	})
	return mc.hc
}

func (mc *MembershipClient) url(addr, path string) string {
	if mc.TLS != nil {
		return "https://" + addr + path
	}
	return "http://" + addr + path
}

// Join asks the cluster reachable at any of seeds (API addresses) to add a
// server, following redirects to the leader (at most DefaultMaxJoinHops).
func Join(ctx context.Context, seeds []string, a JoinArgs) (*Reply, error) {
	return (&MembershipClient{}).Join(ctx, seeds, a)
}

// Remove asks the cluster reachable at any of seeds to remove a server.
func Remove(ctx context.Context, seeds []string, id string) (*Reply, error) {
	return (&MembershipClient{}).Remove(ctx, seeds, id)
}

// FetchPeers asks the node at apiAddr for the peer list.
func FetchPeers(ctx context.Context, apiAddr string) (*PeerList, error) {
	return (&MembershipClient{}).FetchPeers(ctx, apiAddr)
}

// Join is the package-level Join through mc.
func (mc *MembershipClient) Join(ctx context.Context, seeds []string, a JoinArgs) (*Reply, error) {
	return mc.changeMembership(ctx, seeds, PathJoin, a)
}

// Remove is the package-level Remove through mc.
func (mc *MembershipClient) Remove(ctx context.Context, seeds []string, id string) (*Reply, error) {
	return mc.changeMembership(ctx, seeds, PathRemove, RemoveArgs{ServerID: id})
}

func (mc *MembershipClient) changeMembership(ctx context.Context, seeds []string, path string, body any) (*Reply, error) {
	var errs []error
	for _, addr := range seeds {
		for hop := 0; hop < DefaultMaxJoinHops && addr != ""; hop++ {
			var rep Reply
			code, err := mc.postJSON(ctx, addr, path, hop, body, &rep)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", addr, err))
				break
			}
			if code == http.StatusOK && rep.Success {
				return &rep, nil
			}
			errs = append(errs, fmt.Errorf("%s: %d %s", addr, code, rep.Error))
			if code == http.StatusBadRequest || code == http.StatusConflict || code == http.StatusUnauthorized ||
				code == http.StatusForbidden || rep.LeaderAddr == addr {
				return &rep, errors.Join(errs...)
			}
			addr = rep.LeaderAddr
		}
	}
	return nil, fmt.Errorf("raftlock: membership change failed: %w", errors.Join(errs...))
}

// FetchPeers is the package-level FetchPeers through mc.
func (mc *MembershipClient) FetchPeers(ctx context.Context, apiAddr string) (*PeerList, error) {
	var pl PeerList
	if err := mc.getJSON(ctx, apiAddr, PathPeers, "peer list", &pl); err != nil {
		return nil, err
	}
	return &pl, nil
}

// errNoStatus: the member has no status endpoint (a binary that predates
// it answers 404).
var errNoStatus = errors.New("raftlock: no status endpoint")

// fetchStatus asks the member at apiAddr for its status.
func (mc *MembershipClient) fetchStatus(ctx context.Context, apiAddr string) (*NodeStatus, error) {
	var st NodeStatus
	if err := mc.getJSON(ctx, apiAddr, PathStatus, "status", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// getJSON GETs path from the member at apiAddr into out (errNoStatus on
// a 404).
func (mc *MembershipClient) getJSON(ctx context.Context, apiAddr, path, what string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, mc.url(apiAddr, path), nil)
	if err != nil {
		return err
	}
	mc.authorize(req)
	resp, err := mc.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusNotFound && path == PathStatus {
			return fmt.Errorf("%w: %s: %s", errNoStatus, apiAddr, resp.Status)
		}
		return fmt.Errorf("raftlock: %s: %s: %s", apiAddr, resp.Status, bytes.TrimSpace(b))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("raftlock: %s: bad %s: %w", apiAddr, what, err)
	}
	return nil
}

func (mc *MembershipClient) authorize(req *http.Request) {
	if mc.Token != "" {
		req.Header.Set("Authorization", "Bearer "+mc.Token)
	}
}

func (mc *MembershipClient) postJSON(ctx context.Context, addr, path string, hops int, body, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, mc.url(addr, path), bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hopsHeader, strconv.Itoa(hops))
	mc.authorize(req)
	resp, err := mc.http().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return resp.StatusCode, fmt.Errorf("bad reply (%s): %w", resp.Status, err)
	}
	return resp.StatusCode, nil
}
