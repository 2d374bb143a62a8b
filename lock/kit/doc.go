// Package kit is for whoever implements a lock.Locker: the backends, the
// gateway, the Go SDK, test lockers. An application that calls a Locker
// needs only package lock.
//
// It holds what every implementation shares and an application never
// calls: the checks of a request's fields before anything is sent
// (ValidateKey, Normalize, ValidateRenew, ...), the check of a request's
// features against the backend's (Needs, CheckSupported), and the building
// of the Lease and Session a backend hands out (NewLease from a Grant,
// NewSession from a SessionGrant), whose deadline follows the holder's
// view of time that package lock documents (DeadlineFor), and the record
// of the backend's answers on them (Renewed, Released, MarkWanted,
// ExtendSession, SessionRenewed, SessionRefused).
package kit
