package lock

// IdentityRecorder is implemented by a Locker that records, with each lease
// and session in its (replicated) state, the identity that created it
// (AcquireOptions.Identity, SessionOptions.Identity): raftlock. The gateway
// reads quotas from it cluster-wide and refuses a lock token or session id
// presented by another identity; over other Lockers it keeps the same
// accounting itself, per gateway.
type IdentityRecorder interface {
	// IdentityUsage is how many leases and sessions identity holds.
	IdentityUsage(identity string) (leases, sessions int)
	// LeaseIdentity is the identity of the holder of key whose lock token
	// is handle; ok is false when no such lease is held. "" with ok: the
	// lease was granted without an identity.
	LeaseIdentity(key, handle string) (identity string, ok bool)
	// SessionIdentity is the identity of session id; ok is false when no
	// such session is open.
	SessionIdentity(id string) (identity string, ok bool)
}
