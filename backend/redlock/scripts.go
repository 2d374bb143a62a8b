package redlock

import (
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/lock"
)

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed sync.lua
	syncLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed abort.lua
	abortLua string
	//go:embed inspect.lua
	inspectLua string
	//go:embed handoff.lua
	handoffLua string
	//go:embed turn.lua
	turnLua string

	acquireScript = redis.NewScript(acquireLua)
	syncScript    = redis.NewScript(syncLua)
	renewScript   = redis.NewScript(renewLua)
	releaseScript = redis.NewScript(releaseLua)
	abortScript   = redis.NewScript(abortLua)
	inspectScript = redis.NewScript(inspectLua)
	handoffScript = redis.NewScript(handoffLua)
	turnScript    = redis.NewScript(turnLua)
)

// errBadReply: a script answered with a reply of the wrong shape. The node
// counts as not having answered.
var errBadReply = errors.New("redlock: unexpected script reply")

// grantReply is one node's answer to acquire.lua or handoff.lua.
type grantReply struct {
	Granted bool
	// Token is the node-local token of the grant when Granted, else the
	// holder's token.
	Token lock.Token
	// The holder that refused the attempt (acquire.lua only). HolderHandle
	// is "" when no holder refused it: a tombstone did (see abort.lua), or
	// handoff.lua found the old grant gone.
	HolderPTTL   time.Duration
	HolderOwner  string
	HolderHandle string
	// Ticket is the caller's place in the first master's queue of
	// waiting Lockers ("" when not queued; acquire.lua). Turn: node 0
	// refused a free key because it keeps it for the Locker it told.
	Ticket string
	Turn   bool
	// Wanted: a caller that waits was refused by this grant (or, after a
	// handoff, by the grant it replaced).
	Wanted bool
}

func (r grantReply) granted() bool { return r.Granted }

// decodeAcquire reads acquire.lua's {granted, token, pttl, owner[, handle
// or wanted]}.
func decodeAcquire(v []any, err error) (grantReply, error) {
	if err != nil {
		return grantReply{}, err
	}
	if len(v) < 4 {
		return grantReply{}, fmt.Errorf("%w: acquire %v", errBadReply, v)
	}
	r := grantReply{
		Granted:     toInt(v[0]) == 1,
		Token:       lock.Token(toInt(v[1])),
		HolderPTTL:  time.Duration(toInt(v[2])) * time.Millisecond,
		HolderOwner: toString(v[3]),
	}
	if len(v) >= 5 {
		if r.Granted {
			r.Wanted = toString(v[4]) == "1"
		} else {
			r.HolderHandle = toString(v[4])
		}
	}
	if len(v) >= 6 && !r.Granted {
		r.Ticket = toString(v[5])
		r.Turn = r.HolderHandle == ""
	}
	return r, nil
}

// decodeHandoff reads handoff.lua's {granted, token[, wanted]}.
func decodeHandoff(v []any, err error) (grantReply, error) {
	if err != nil {
		return grantReply{}, err
	}
	if len(v) < 2 {
		return grantReply{}, fmt.Errorf("%w: handoff %v", errBadReply, v)
	}
	return grantReply{Granted: toInt(v[0]) == 1, Token: lock.Token(toInt(v[1])),
		Wanted: len(v) >= 3 && toString(v[2]) == "1"}, nil
}

// releaseReply is a node's answer to release.lua: 0 not held, 1 deleted,
// 2 deleted and wanted (a caller that waits was refused by the grant).
type releaseReply struct{ held, wanted bool }

func (r releaseReply) granted() bool { return r.held }

func decodeRelease(v int64, err error) (releaseReply, error) {
	return releaseReply{held: v == 1 || v == 2, wanted: v == 2}, err
}

// renewReply is a node's answer to renew.lua: 0 not held, 1 extended, 2
// extended and wanted (a caller that waits was refused by the grant).
type renewReply struct{ held, wanted bool }

func (r renewReply) granted() bool { return r.held }

func decodeRenew(v int64, err error) (renewReply, error) {
	return renewReply{held: v == 1 || v == 2, wanted: v == 2}, err
}

// holderReply is one node's answer to inspect.lua: the holder as that node
// sees it.
type holderReply struct {
	Held   bool // false when the key is free on the node
	Handle string
	Owner  string
	Token  lock.Token // the node-local token
	Value  string
	PTTL   time.Duration
	Final  bool // Token is the grant's, as recorded by sync.lua
}

// granted counts the node toward the nodes that hold the key.
func (r holderReply) granted() bool { return r.Held }

// decodeInspect reads inspect.lua's false (free) or {handle, owner, token,
// value, pttl[, final]}.
func decodeInspect(v []any, err error) (holderReply, error) {
	if errors.Is(err, redis.Nil) {
		return holderReply{}, nil
	}
	if err != nil {
		return holderReply{}, err
	}
	if len(v) < 5 {
		return holderReply{}, fmt.Errorf("%w: inspect %v", errBadReply, v)
	}
	return holderReply{
		Held:   true,
		Handle: toString(v[0]),
		Owner:  toString(v[1]),
		Token:  lock.Token(toInt(v[2])),
		Value:  toString(v[3]),
		PTTL:   time.Duration(toInt(v[4])) * time.Millisecond,
		Final:  len(v) >= 6 && toString(v[5]) == "1",
	}, nil
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	case float64:
		return int64(x)
	}
	return 0
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
