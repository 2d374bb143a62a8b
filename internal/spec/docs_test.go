package spec

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

const protocolPath = "../../docs/protocol.md"

func readDoc(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// section is the text of the markdown section whose heading is title, up
// to the next heading of the same or a higher level.
func section(t *testing.T, doc, title string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^(#+) ` + regexp.QuoteMeta(title) + `\s*$`)
	loc := re.FindStringSubmatchIndex(doc)
	if loc == nil {
		t.Fatalf("docs/protocol.md has no section %q", title)
	}
	level := loc[3] - loc[2]
	rest := doc[loc[1]:]
	end := regexp.MustCompile(`(?m)^#{1,` + strconv.Itoa(level) + `} `).FindStringIndex(rest)
	if end == nil {
		return rest
	}
	return rest[:end[0]]
}

// TestMethodsMatchSpec: for every path of docs/openapi.yaml, a method the
// path does not document is answered 405 method_not_allowed, with Allow
// naming exactly the documented methods, if and only if the spec lists
// 405 on that path (on every operation of it); a documented method is
// never 405.
func TestMethodsMatchSpec(t *testing.T) {
	s := loadSpec(t)
	g := gateway.New(locktest.NewMemStoreWithFeatures(lock.AllFeatures).NewLocker(), gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(g)
	defer func() { g.Close(); srv.Close() }()
	r := &restClient{t: t, s: s, client: &http.Client{Timeout: 10 * time.Second}}
	methods := []string{"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}
	for path, item := range s.doc.Paths.Map() {
		url := srv.URL + strings.NewReplacer("{key}", "k", "{ticket}", "nope").Replace(path)
		var documented []string
		listed := 0
		for m, op := range item.Operations() {
			documented = append(documented, m)
			if op.Responses.Status(405) != nil {
				listed++
			}
		}
		if listed != 0 && listed != len(documented) {
			t.Errorf("%s lists 405 on %d of its %d operations: list it on each (the path's answer to other methods)", path, listed, len(documented))
		}
		slices.Sort(documented)
		answered405 := false
		for _, m := range methods {
			req, _ := http.NewRequest(m, url, nil)
			resp, err := r.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if slices.Contains(documented, m) {
				if resp.StatusCode == http.StatusMethodNotAllowed {
					t.Errorf("%s %s, a documented method, answered 405", m, path)
				}
				continue
			}
			if resp.StatusCode != http.StatusMethodNotAllowed {
				if listed > 0 {
					t.Errorf("%s %s answered %d; the spec lists 405 for the path's other methods", m, path, resp.StatusCode)
				}
				continue
			}
			answered405 = true
			if listed == 0 {
				t.Errorf("%s %s answered 405, which docs/openapi.yaml does not list for %s", m, path, path)
			}
			var allow []string
			for _, a := range strings.Split(resp.Header.Get("Allow"), ",") {
				if a = strings.TrimSpace(a); a != "" {
					allow = append(allow, a)
				}
			}
			slices.Sort(allow)
			if !slices.Equal(allow, documented) {
				t.Errorf("%s %s: Allow %q, the spec documents %v", m, path, resp.Header.Get("Allow"), documented)
			}
			r.component(m+" "+path, "MethodNotAllowed", resp, data)
		}
		if listed > 0 && !answered405 {
			t.Errorf("%s lists 405, which no method answered", path)
		}
	}
}

// errorRow is one row of docs/protocol.md's error-code table.
var errorRow = regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([^|]*) \\|")

// TestErrorTableStatuses: the error-code table of docs/protocol.md has a
// row per code of internal/wire.Codes; its HTTP column is the status REST
// answers the code with (wire.Codes), and that status is one
// docs/openapi.yaml lists on a REST path. A code REST never answers says
// "— (WebSocket only)".
func TestErrorTableStatuses(t *testing.T) {
	s := loadSpec(t)
	table := section(t, readDoc(t, protocolPath), "Error codes")
	rest := map[int]bool{}
	for path, item := range s.doc.Paths.Map() {
		if path == "/v1/ws" {
			continue
		}
		for _, op := range item.Operations() {
			for code := range op.Responses.Map() {
				if n, err := strconv.Atoi(code); err == nil {
					rest[n] = true
				}
			}
		}
	}
	rows := map[string]string{}
	for _, m := range errorRow.FindAllStringSubmatch(table, -1) {
		rows[m[1]] = strings.TrimSpace(m[2])
	}
	for _, c := range wire.Codes {
		cell, ok := rows[c.Name]
		if !ok {
			t.Errorf("docs/protocol.md's error table has no row for %q", c.Name)
			continue
		}
		delete(rows, c.Name)
		if strings.HasPrefix(cell, "—") {
			if !strings.Contains(cell, "WebSocket only") {
				t.Errorf("%s: HTTP %q: a code without a status is \"— (WebSocket only)\"", c.Name, cell)
			}
			if rest[c.Status] {
				t.Errorf("%s is documented WebSocket only, but docs/openapi.yaml lists its status %d on REST paths", c.Name, c.Status)
			}
			continue
		}
		n, err := strconv.Atoi(regexp.MustCompile(`^[0-9]+`).FindString(cell))
		if err != nil {
			t.Errorf("%s: HTTP column %q is neither a status nor \"— (WebSocket only)\"", c.Name, cell)
			continue
		}
		if n != c.Status {
			t.Errorf("%s: docs/protocol.md says HTTP %d, REST answers %d (internal/wire.Codes)", c.Name, n, c.Status)
		}
		if !rest[n] {
			t.Errorf("%s: HTTP %d, which no REST path of docs/openapi.yaml lists", c.Name, n)
		}
	}
	for name := range rows {
		t.Errorf("docs/protocol.md's error table has %q, which internal/wire.Codes does not", name)
	}
}

// fileRef is a repository file named in prose: a path with a directory,
// or a doc of docs/ by its name.
var fileRef = regexp.MustCompile("`?\\b((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\\.(?:go|md|yaml|json|ts|py))\\b")

// TestProtocolReferences: every file docs/protocol.md names exists (in
// the repository, or in docs/ or docs/schemas/ for a bare name), and its "Retrying"
// rules send the reader to no Go source: a client written from the
// protocol alone must find every rule in it.
func TestProtocolReferences(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	doc := readDoc(t, protocolPath)
	seen := 0
	for _, m := range fileRef.FindAllStringSubmatch(doc, -1) {
		ref := m[1]
		if strings.HasPrefix(ref, "./") || strings.Contains(ref, "example.") {
			continue
		}
		seen++
		found := false
		for _, dir := range []string{"", "docs", "docs/schemas"} {
			if _, err := os.Stat(filepath.Join(root, dir, ref)); err == nil {
				found = true
			}
		}
		if !found {
			t.Errorf("docs/protocol.md names %s, which is neither in the repository nor in docs/ or docs/schemas/", ref)
		}
	}
	if seen < 5 {
		t.Fatalf("found %d file references in docs/protocol.md: the pattern is broken", seen)
	}
	if m := regexp.MustCompile(`[A-Za-z0-9_/]+\.go\b`).FindString(section(t, doc, "Retrying")); m != "" {
		t.Errorf("docs/protocol.md's Retrying section sends the reader to Go source (%s): state the rule in the protocol", m)
	}
}

// TestUpgradeIsNotRedirected: a follower accepts the WebSocket upgrade
// and answers not_leader frames (TestProtocol's WebSocket part checks
// it), so neither docs/openapi.yaml nor docs/protocol.md may tell a client
// to follow a redirect on the upgrade.
func TestUpgradeIsNotRedirected(t *testing.T) {
	s := loadSpec(t)
	op := s.doc.Paths.Value("/v1/ws").Get
	for _, st := range []int{301, 302, 307, 308, 421} {
		if op.Responses.Status(st) != nil {
			t.Errorf("docs/openapi.yaml lists %d for the upgrade, which no gateway answers", st)
		}
	}
	follow := regexp.MustCompile(`(?i)follow[^.]*(421|307)[^.]*upgrade|upgrade[^.]*follow[^.]*(421|307)`)
	for _, sentence := range strings.Split(strings.ReplaceAll(readDoc(t, protocolPath), "\n", " "), ". ") {
		if follow.MatchString(sentence) {
			t.Errorf("docs/protocol.md tells a client to follow a redirect on the upgrade: %q", sentence)
		}
	}
}

// TestTokenPrecisionDocumented: a restored or recovered raftlock cluster
// starts its fencing counter at the wall clock in nanoseconds
// (fsm.TokenFloor), beyond 2^53, so the docs must not promise JavaScript's
// numbers hold every token, and must say that tokens can exceed it.
func TestTokenPrecisionDocumented(t *testing.T) {
	if fsm.TokenFloor(time.Now(), 0, 0) <= 1<<53 {
		t.Fatal("fsm.TokenFloor is no longer beyond 2^53: revisit what the docs say")
	}
	for _, path := range []string{protocolPath, "../../docs/console.md"} {
		doc := strings.ReplaceAll(readDoc(t, path), "\n", " ")
		if regexp.MustCompile(`(?i)(stay|below)[^.]*2\^53[^.]*(exactly|hold)`).MatchString(doc) {
			t.Errorf("%s says fencing tokens stay below 2^53", path)
		}
		if !strings.Contains(doc, "exceed 2^53") {
			t.Errorf("%s does not say that fencing tokens can exceed 2^53", path)
		}
	}
}

// TestWatchExampleRevisions: the watch examples of docs/protocol.md follow
// the revision rule it states (raftlock): an event's revision is its Raft
// entry's index times 2^20 plus its position among the entry's events,
// and synced's is its index times 2^20 plus 2^20 − 1; revisions increase
// along a watch.
func TestWatchExampleRevisions(t *testing.T) {
	doc := section(t, readDoc(t, protocolPath), "Watches: watch (9) and unwatch (10)")
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(doc, -1)
	checked := 0
	for _, b := range blocks {
		var last uint64
		dec := json.NewDecoder(bytes.NewReader([]byte(b[1])))
		for {
			var m struct {
				Type     string `json:"type"`
				Event    string `json:"event"`
				Revision uint64 `json:"revision"`
			}
			if dec.Decode(&m) != nil {
				break
			}
			if m.Type != "event" || m.Revision == 0 {
				continue
			}
			checked++
			low := m.Revision & (1<<20 - 1)
			if m.Event == "synced" && low != 1<<20-1 {
				t.Errorf("synced at revision %d: not an index times 2^20 plus 2^20 − 1", m.Revision)
			}
			if m.Event != "synced" && low == 1<<20-1 {
				t.Errorf("%s at revision %d: the position 2^20 − 1 is synced's", m.Event, m.Revision)
			}
			if m.Revision <= last {
				t.Errorf("revision %d after %d: revisions increase along a watch", m.Revision, last)
			}
			last = m.Revision
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d example events: the examples or the parser changed", checked)
	}
}
