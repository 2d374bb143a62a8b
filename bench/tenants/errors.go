package tenants

import (
	"errors"
	"fmt"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// The refusal codes the attacker counts (docs/protocol.md): the tenants'
// own and the per-connection limits a flood across connections may meet
// first.
const (
	CodeQuotaExceeded   = "quota_exceeded"
	CodeRateLimited     = "rate_limited"
	CodeTooManySessions = "too_many_sessions"
	CodeForbidden       = "forbidden"
	codeTooManyWaiters  = "too_many_waiters"
	codeTooManyWatches  = "too_many_watches"
	codeTooManyLocks    = "too_many_locks"
	codeTooManyTickets  = "too_many_tickets"
)

// tenantsRefusal returns the refusal code of err — a tenant's refusal, or
// a per-connection limit — and, for quota_exceeded over REST, the quota
// the gateway named; "" when err is no refusal.
func tenantsRefusal(err error) (code, quota string) {
	var re *tenantsRESTError
	if errors.As(err, &re) {
		switch re.Code {
		case CodeQuotaExceeded, CodeRateLimited, CodeTooManySessions, CodeForbidden,
			codeTooManyWaiters, codeTooManyWatches, codeTooManyLocks, codeTooManyTickets:
			return re.Code, re.Quota
		}
		return "", ""
	}
	switch {
	case errors.Is(err, lock.ErrQuotaExceeded):
		return CodeQuotaExceeded, ""
	case errors.Is(err, lock.ErrRateLimited):
		return CodeRateLimited, ""
	case errors.Is(err, lock.ErrTooManySessions):
		return CodeTooManySessions, ""
	case errors.Is(err, lock.ErrForbidden):
		return CodeForbidden, ""
	}
	var se *client.ServerError
	if errors.As(err, &se) {
		switch se.Code {
		case codeTooManyWaiters, codeTooManyWatches, codeTooManyLocks, codeTooManyTickets:
			return se.Code, ""
		}
	}
	return "", ""
}

// tenantsErrKind names an error for the report: its refusal code, else
// its kind.
func tenantsErrKind(err error) string {
	if err == nil {
		return "none"
	}
	if code, _ := tenantsRefusal(err); code != "" {
		return code
	}
	var re *tenantsRESTError
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, lock.ErrSessionExpired):
		return "session_expired"
	case errors.Is(err, lock.ErrExpired):
		return "expired"
	case errors.As(err, &re):
		if re.Code != "" {
			return re.Code
		}
		return fmt.Sprintf("http %d", re.Status)
	}
	return provision.ErrorKindOrUnsupported(err)
}
