package testenv

import (
	"testing"

	"github.com/lockgate/lockgate/internal/servers"
)

// FakeClock shifts the wall clock of C programs started with its Env; see
// servers.FakeClock.
type FakeClock = servers.FakeClock

// NewFakeClock returns a FakeClock at offset zero, removed when the test
// ends. It skips (or under CI=true fails) the test if libfaketime is not
// installed.
func NewFakeClock(t testing.TB) *FakeClock {
	t.Helper()
	c, err := servers.NewFakeClock()
	if err != nil {
		failStart(t, "NewFakeClock", err)
		return nil
	}
	t.Cleanup(c.Close)
	return c
}
