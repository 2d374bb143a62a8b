package servers

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// requireZooKeeper skips the test (fails it under CI=true) unless java and
// Debian's ZooKeeper jars are installed.
func requireZooKeeper(t *testing.T) {
	t.Helper()
	_, err := LookBinary("java", "default-jre-headless")
	skipMissing(t, err)
	_, err = ZooKeeperClassPath("")
	skipMissing(t, err)
}

// A missing zookeeper.jar is a *MissingError naming the Debian package,
// which testenv turns into a skip (a failure under CI=true).
func TestZooKeeperClassPathMissing(t *testing.T) {
	_, err := ZooKeeperClassPath(t.TempDir())
	var m *MissingError
	if !errors.As(err, &m) || !errors.Is(err, ErrNotInstalled) || m.Package != "zookeeper" {
		t.Fatalf("ZooKeeperClassPath(empty dir) = %v; want a *MissingError for package zookeeper", err)
	}
}

// StartZooKeeper retries with new ports when a client port is taken, as
// the other Start functions do: the member that could not bind exits, and
// its "Address already in use" marks the attempt as retryable.
func TestZooKeeperRetriesTakenPort(t *testing.T) {
	t.Parallel()
	requireZooKeeper(t)
	pick, taken, calls := takenPortPicker(t)
	z, err := StartZooKeeper(context.Background(), 1, ZooKeeperOptions{Log: t, pick: pick})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Close)
	m := z.Members[0]
	if m.ClientPort == taken || calls() != 2 {
		t.Errorf("ClientPort = %d (taken %d), picker called %d times; want a new port on the 2nd attempt", m.ClientPort, taken, calls())
	}
	if mode, err := m.Mode(); err != nil || mode != "standalone" {
		t.Errorf("Mode() = %q, %v; want standalone", mode, err)
	}
	if !strings.HasSuffix(z.Addrs[0], ":"+strconv.Itoa(m.ClientPort)) {
		t.Errorf("Addrs = %v, ClientPort %d", z.Addrs, m.ClientPort)
	}
}
