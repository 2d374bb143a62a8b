package fencedstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client talks to a store served by NewHandler.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// NewClient returns a client for the server at baseURL (such as
// "http://127.0.0.1:8000"). A nil httpClient means http.DefaultClient.
func NewClient(baseURL string, httpClient *http.Client, opts ...ClientOption) *Client {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), hc: httpClient}
	for _, o := range opts {
		o(c)
	}
	return c
}

// ClientOption configures NewClient.
type ClientOption func(*Client)

// WithToken makes the client send "Authorization: Bearer token" with every
// request, for a server with `lockgate store --auth-tokens-file`.
func WithToken(token string) ClientOption { return func(c *Client) { c.token = token } }

// StatusError is an error answer of the server other than a stale token.
// It matches (errors.Is) ErrInvalid for codes bad_json, invalid,
// invalid_key, invalid_client_id and too_large; ErrInvalidKey and
// ErrInvalidClientID for their codes; ErrUnauthorized for a 401.
type StatusError struct {
	StatusCode int
	Code       string
	Message    string
}

func (e *StatusError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("fencedstore: server answered %d: %s", e.StatusCode, e.Message)
	}
	return fmt.Sprintf("fencedstore: server answered %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// Is makes errors.Is(err, ErrInvalid) true for rejected input, and matches
// the sentinels of the specific codes.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrInvalid:
		switch e.Code {
		case CodeBadJSON, CodeInvalid, CodeInvalidKey, CodeInvalidClientID, CodeTooLarge:
			return true
		}
	case ErrInvalidKey:
		return e.Code == CodeInvalidKey
	case ErrInvalidClientID:
		return e.Code == CodeInvalidClientID
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	}
	return false
}

// Write sends req. A stale token gives a *StaleTokenError, so
// errors.Is(err, ErrStaleToken) holds; nil means the write is durable.
func (c *Client) Write(ctx context.Context, req WriteRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/write", bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	var resp writeResponse
	status, err := c.do(hreq, &resp)
	if err != nil {
		return err
	}
	if status == http.StatusOK && resp.Success {
		return nil
	}
	return answerError(status, resp.Error)
}

// Read returns the latest accepted write of key; found is false on 404.
func (c *Client) Read(ctx context.Context, key string) (rec Record, found bool, err error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/read/"+url.PathEscape(key), nil)
	if err != nil {
		return Record{}, false, err
	}
	var raw json.RawMessage
	status, err := c.do(hreq, &raw)
	if err != nil {
		return Record{}, false, err
	}
	switch status {
	case http.StatusOK:
		err = json.Unmarshal(raw, &rec)
		return rec, err == nil, err
	case http.StatusNotFound:
		return Record{}, false, nil
	}
	return Record{}, false, rawError(status, raw)
}

// Stats returns the server's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/stats", nil)
	if err != nil {
		return Stats{}, err
	}
	var raw json.RawMessage
	status, err := c.do(hreq, &raw)
	if err != nil {
		return Stats{}, err
	}
	if status != http.StatusOK {
		return Stats{}, rawError(status, raw)
	}
	var st Stats
	err = json.Unmarshal(raw, &st)
	return st, err
}

// do sends req and decodes a JSON body into v.
func (c *Client) do(req *http.Request, v any) (int, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1<<20))
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		if resp.StatusCode == http.StatusOK {
			return 0, fmt.Errorf("fencedstore: bad answer from %s: %w", req.URL, err)
		}
		return 0, &StatusError{StatusCode: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	return resp.StatusCode, nil
}

func rawError(status int, raw json.RawMessage) error {
	var resp writeResponse
	json.Unmarshal(raw, &resp)
	return answerError(status, resp.Error)
}

func answerError(status int, e *errorBody) error {
	if e == nil {
		return &StatusError{StatusCode: status, Message: http.StatusText(status)}
	}
	if status == http.StatusConflict && e.Code == CodeStaleToken && e.Token != nil && e.Highest != nil {
		return &StaleTokenError{Key: e.Key, Token: *e.Token, Highest: *e.Highest}
	}
	return &StatusError{StatusCode: status, Code: e.Code, Message: e.Message}
}
