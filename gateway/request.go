package gateway

import (
	"fmt"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// What a request asks for, whichever protocol carried it: a WebSocket
// command or a REST body. Each protocol reads its own message into the
// request types below, and one conversion turns them into validated
// options, so that an option is added, and checked, in one place and the
// two protocols refuse the same input with the same error. What differs
// by protocol stays with it: how long to wait (a WebSocket waitMs of 0 is
// no bound, a REST wait_ms of 0 is no wait), the owner of a client that
// names none, and the spelling of field names in messages.

// acquireRequest is an acquire's fields: WebSocket commands 1, 5, 7 and 8,
// REST POST /locks/{key} and POST /locks.
type acquireRequest struct {
	Key   string   // the key of an acquire
	Keys  []string // the keys of an acquireAll (Multi)
	Multi bool

	TTLMS       int64   // 0: the default TTL (the session's, in a session)
	Value       *string // nil: none
	ClientID    string  // the owner; "": the protocol's default
	LockToken   string  // a client-chosen lease handle; "": the backend's
	Mode        string  // "", "exclusive" or "shared"
	Permits     int
	LockDelayMS int64
	SessionID   string // "": no session
}

// wsAcquire is the acquire req names (commands 1, 5, 7, 8).
func wsAcquire(req wire.Request) acquireRequest {
	return acquireRequest{Key: req.Key, Keys: req.Keys,
		Multi: req.CommandType == wire.CmdAcquireAll || req.CommandType == wire.CmdTryAcquireAll,
		TTLMS: req.TTL, Value: req.Value, ClientID: req.ClientID, LockToken: req.LockToken,
		Mode: req.Mode, Permits: req.Permits, LockDelayMS: req.LockDelayMS, SessionID: req.SessionID}
}

// firstKey is the key the options are checked for: the acquire's, or an
// acquireAll's first.
func (r *acquireRequest) firstKey() string {
	if r.Multi {
		return r.Keys[0]
	}
	return r.Key
}

// acquireOptions turns an acquire request into the options to ask the
// Locker for, checked before the Locker sees them (a bad request takes no
// slot, wait or ticket). defaultOwner gives the owner of a request that
// names none. The checks, in the order a request with several faults
// meets them: the key (or keys); the options' own rules (mode, then the
// lock package's: TTL, value, permits, lock-delay, lock token, owner);
// what the backend does not offer (the options' features, multikey for
// an acquireAll, sessions); the session id's form. A request is wrong
// before it is unsupported.
//
// The options are not normalized (the Locker does that): a ttl of 0 is
// the default TTL, which the gateway never auto-renews (renewal is the
// client's job, so that a crashed client's leases run out). A lease in a
// session has TTL 0 unless the request named one (which must then be the
// session's), and the session's owner unless the request named one; the
// session itself is resolved by sessionAcquire, which may take a round
// trip.
func (g *Gateway) acquireOptions(r acquireRequest, defaultOwner func() string) (lock.AcquireOptions, *apiError) {
	var extra lock.Features
	if r.Multi {
		if r.Keys == nil {
			return lock.AcquireOptions{}, newError(wire.CodeMissingField, "keys is required")
		}
		if err := kit.ValidateKeys(r.Keys); err != nil {
			return lock.AcquireOptions{}, toAPIError(err)
		}
		extra = lock.FeatureMultiKey
	} else if r.Key == "" {
		return lock.AcquireOptions{}, newError(wire.CodeInvalidKey, "key is empty")
	}
	opts := lock.AcquireOptions{TTL: ttlOption(r.TTLMS), Owner: r.ClientID, Handle: r.LockToken}
	if opts.Owner == "" {
		opts.Owner = defaultOwner()
	}
	if r.Value != nil {
		opts.Value = []byte(*r.Value)
	}
	m, err := lock.ParseMode(r.Mode)
	if err != nil {
		return opts, toAPIError(err)
	}
	opts.Mode, opts.Permits, opts.LockDelay = m, r.Permits, lockDelayOption(r.LockDelayMS)
	if _, err := kit.Normalize(opts, r.firstKey(), "gateway"); err != nil {
		return opts, toAPIError(err)
	}
	need := kit.Needs(opts) | extra
	if r.SessionID != "" {
		// Sessions is the last feature of the set: asking for it with the
		// others refuses what the options lack first, as the backend would.
		need |= lock.FeatureSessions
	}
	if need != 0 {
		if aerr := g.unsupported(need); aerr != nil {
			return opts, aerr
		}
	}
	if r.SessionID != "" {
		if aerr := checkSessionID(r.SessionID); aerr != nil {
			return opts, aerr
		}
		if r.TTLMS == 0 {
			opts.TTL = 0
		}
		opts.Owner = r.ClientID
		opts.AutoRenew = false
	}
	return opts, nil
}

// spelling is how a protocol names a lease's fields in its messages.
type spelling struct {
	lockToken, fencingToken string
	key                     string // the key the fencing token's must be
}

var (
	wsSpelling   = spelling{lockToken: "lockToken", fencingToken: "fencingToken", key: "the request's key"}
	restSpelling = spelling{lockToken: "lock_token", fencingToken: "fencing_token", key: "the lock's key"}
)

// leaseRef checks the lease a renew or release names — key, lock token,
// fencing token — before the backend sees it: a missing field is
// missing_field, and a malformed key or token gets its own 400
// (invalid_key, invalid_handle) and never joins a backend's batch with
// other clients' operations.
//
// Normalize applies the lock package's one rule for handles
// (lock.MinHandleLen to lock.MaxHandleLen lowercase hex: what a
// client-chosen handle must be and every backend mints) and its key rule;
// the other options are left zero, which it accepts. This is stricter
// than kit.ValidateLease, which checks only the handle's length: a
// malformed token gets its own 400 here instead of not_held.
func leaseRef(key, lockToken string, ft *wire.FencingToken, sp spelling) *apiError {
	switch {
	case key == "":
		return newError(wire.CodeInvalidKey, "key is empty")
	case lockToken == "":
		return newError(wire.CodeMissingField, sp.lockToken+" is required")
	case ft == nil:
		return newError(wire.CodeMissingField, sp.fencingToken+" is required")
	}
	if _, err := kit.Normalize(lock.AcquireOptions{Handle: lockToken}, key, "gateway"); err != nil {
		return toAPIError(err)
	}
	if k := ft.Key; k != "" && k != key {
		return newError(wire.CodeBadJSON, fmt.Sprintf("%s.key %q is not %s %q", sp.fencingToken, k, sp.key, key))
	}
	return nil
}

// sessionOptions are the options of a session open (WebSocket command 11,
// REST POST /sessions), checked: ttlMS 0 is the default TTL, and
// defaultOwner gives the owner of a request that names none.
func sessionOptions(ttlMS int64, clientID string, defaultOwner func() string) (lock.SessionOptions, *apiError) {
	opts := lock.SessionOptions{Owner: clientID}
	if ttlMS != 0 {
		opts.TTL = ttlOption(ttlMS)
	}
	if opts.Owner == "" {
		opts.Owner = defaultOwner()
	}
	if err := kit.ValidateSessionOptions(opts); err != nil {
		return opts, toAPIError(err)
	}
	return opts, nil
}

// sessionRef checks a request on an existing session (WebSocket commands
// 12 and 13, REST /sessions/renew and /sessions/close): the backend must
// keep sessions and the id be well-formed, both before the backend sees
// it.
func (g *Gateway) sessionRef(id string) *apiError {
	if _, aerr := g.sessionKeeper(); aerr != nil {
		return aerr
	}
	return checkSessionID(id)
}

// restOwner is the owner of a REST client that names none: one of its own
// per request.
func restOwner() string { return "rest-" + lock.NewHandle()[:12] }
