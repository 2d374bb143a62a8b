package lock

import "github.com/lockgate/lockgate/lock/internal/leasekit"

// lock/kit builds leases and sessions for whoever implements a Locker; the
// state it must fill is unexported here, so this package hands it the
// constructors (see lock/internal/leasekit).
func init() {
	leasekit.DeadlineFor = deadlineFor
	leasekit.InitLease = initLease
	leasekit.InitSession = initSession
	leasekit.ExtendLease = (*Lease).extend
	leasekit.MarkWanted = (*Lease).markWanted
	leasekit.ExtendSession = (*Session).extend
	leasekit.SessionRenewed = (*Session).renewed
	leasekit.SessionRefused = (*Session).refused
	leasekit.SessionLeases = (*Session).withToken
}
