package tenants

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"time"
)

// tenantsRESTError is a REST answer other than the one asked for.
type tenantsRESTError struct {
	Status  int
	Code    string
	Quota   string
	Message string
}

func (e *tenantsRESTError) Error() string {
	s := fmt.Sprintf("REST: HTTP %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Quota != "" {
		s += " (quota " + e.Quota + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// tenantsREST is a REST client of the attacker's with connections of
// its own, dropped every tenantsRESTReconnect requests. It is safe for
// concurrent use.
type tenantsREST struct {
	base, token string
	tr          *http.Transport
	hc          *http.Client
	n           atomic.Int64
}

func (a *tenantsAttacker) newREST(i int) *tenantsREST {
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * tenantsWaiterWorkersPerConn, IdleConnTimeout: 30 * time.Second}
	rc := &tenantsREST{base: "http://" + a.eps[i%len(a.eps)], token: a.token, tr: tr,
		// A follower answers 307 to the leader, which the client follows
		// (the same host: the token goes along).
		hc: &http.Client{Transport: tr, Timeout: 15 * time.Second}}
	a.mu.Lock()
	a.rests = append(a.rests, rc)
	a.mu.Unlock()
	return rc
}

// do sends a JSON body (nil: none) and, when the answer's status is one
// of want, decodes its body into out (nil: ignored); any other status is
// a *tenantsRESTError.
func (rc *tenantsREST) do(ctx context.Context, method, path string, body, out any, want ...int) (int, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, rc.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+rc.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if rc.n.Add(1)%tenantsRESTReconnect == 0 {
		defer rc.tr.CloseIdleConnections()
	}
	resp, err := rc.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, err
	}
	if slices.Contains(want, resp.StatusCode) {
		if out != nil && len(data) > 0 {
			return resp.StatusCode, json.Unmarshal(data, out)
		}
		return resp.StatusCode, nil
	}
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Quota   string `json:"quota"`
		} `json:"error"`
	}
	json.Unmarshal(data, &eb)
	return resp.StatusCode, &tenantsRESTError{Status: resp.StatusCode, Code: eb.Error.Code, Quota: eb.Error.Quota, Message: eb.Error.Message}
}
