package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lockgate/lockgate/backend/raftlock"
)

// servePortsFile, in a `lockgate serve` data directory, records the
// loopback addresses its embedded nodes took on their first start.
const servePortsFile = "serve-addrs.json"

// nodeAddrs are one embedded node's Raft and API addresses.
type nodeAddrs struct {
	Raft string `json:"raft"`
	API  string `json:"api"`
}

// embeddedAddrs decides where `lockgate serve`'s embedded nodes listen.
//
// A new cluster takes free loopback ports (port 0), so that a serve never
// collides with another serve, a `lockgate node` on the default ports, or
// a test suite running beside it. The Raft addresses are part of the Raft
// configuration, so a cluster restarted from its data directory must come
// back on the same ones: they are read from servePortsFile, written after
// the first start. A data directory made before that file existed keeps
// the default ports (8080+id, 50050+id) it was created with.
type embeddedAddrs struct {
	dir    string
	stored map[string]nodeAddrs // nil: a new cluster
	legacy bool                 // an existing cluster without the file
}

func loadEmbeddedAddrs(dataDir string) (*embeddedAddrs, error) {
	e := &embeddedAddrs{dir: dataDir}
	data, err := os.ReadFile(filepath.Join(dataDir, servePortsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		_, statErr := os.Stat(filepath.Join(dataDir, "node-1"))
		e.legacy = statErr == nil
		return e, nil
	case err != nil:
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	if err := json.Unmarshal(data, &e.stored); err != nil {
		return nil, fmt.Errorf("--data-dir: %s is not a valid address file: %w", filepath.Join(dataDir, servePortsFile), err)
	}
	return e, nil
}

// configure sets cfg's addresses.
func (e *embeddedAddrs) configure(cfg *raftlock.Config) {
	if a, ok := e.stored[cfg.ID]; ok {
		cfg.RaftAddr, cfg.APIAddr = a.Raft, a.API
		return
	}
	if e.legacy {
		return // DefaultConfig's ports
	}
	cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
}

// save records the addresses the nodes listen on (0600: the file is
// beside the Raft state).
func (e *embeddedAddrs) save(c *raftlock.LocalCluster) error {
	m := make(map[string]nodeAddrs)
	for _, n := range c.Nodes() {
		m[n.ID()] = nodeAddrs{Raft: n.RaftAddr(), API: n.APIAddr()}
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(e.dir, servePortsFile+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	return os.Rename(tmp, filepath.Join(e.dir, servePortsFile))
}
