package wire

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// documentedCodes reads the error-code table of docs/protocol.md: code →
// HTTP status (the first number of its HTTP column), or wsOnly for a code
// REST never answers (its HTTP column says "— (WebSocket only)").
func documentedCodes(t *testing.T) map[string]int {
	t.Helper()
	data, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Error codes\n")
	if !ok {
		t.Fatal(`docs/protocol.md has no "## Error codes" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| ([0-9]+|— \\(WebSocket only\\))")
	doc := map[string]int{}
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := doc[m[1]]; dup {
			t.Errorf("docs/protocol.md lists %s twice", m[1])
		}
		if strings.HasPrefix(m[2], "—") {
			doc[m[1]] = wsOnly
			continue
		}
		doc[m[1]], _ = strconv.Atoi(m[2])
	}
	if len(doc) == 0 {
		t.Fatal("no rows read from docs/protocol.md's error-code table")
	}
	return doc
}

// wsOnly marks a documented code that REST never answers.
const wsOnly = -1

// TestDocumentedCodes: docs/protocol.md's table and Codes list the same
// codes with the same HTTP statuses, so that a client written from the doc
// in another language handles every code the gateway sends.
func TestDocumentedCodes(t *testing.T) {
	doc := documentedCodes(t)
	for _, c := range Codes {
		status, ok := doc[c.Name]
		switch {
		case !ok:
			t.Errorf("code %s (HTTP %d) is missing from docs/protocol.md", c.Name, c.Status)
		case status == wsOnly:
			// The table's status is what a REST answer would carry;
			// internal/spec checks that REST never answers it.
		case status != c.Status:
			t.Errorf("code %s: docs/protocol.md says HTTP %d, the table %d", c.Name, status, c.Status)
		}
	}
	for name := range doc {
		if _, ok := Lookup(name); !ok {
			t.Errorf("docs/protocol.md lists code %s, which the table lacks", name)
		}
	}
}

// TestCodeTable: the table's own consistency: unique names, a status for
// each, a Field exactly for the invalid_* codes that carry a lock sentinel.
func TestCodeTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Codes {
		if seen[c.Name] {
			t.Errorf("code %s listed twice", c.Name)
		}
		seen[c.Name] = true
		if c.Status < 100 || c.Status > 599 {
			t.Errorf("code %s: HTTP status %d", c.Name, c.Status)
		}
		validation := c.Sentinel != nil && strings.HasPrefix(c.Name, "invalid_")
		if validation != (c.Field != "") {
			t.Errorf("code %s: Field %q", c.Name, c.Field)
		}
	}
	if Status("no_such_code") != 500 || Sentinel("no_such_code") != nil {
		t.Error("an unknown code is not a 500 without a sentinel")
	}
}

// TestCodeRoundTrip checks the mapping both ways. Error → code → error:
// every lock error a client can get back (a Sentinel) is answered with a
// code whose client error matches it again. Code → error → code: every
// code whose client error is its cause comes back as itself. And each
// cause, bare, wrapped or inside its structured error, gets its code.
func TestCodeRoundTrip(t *testing.T) {
	// The codes whose client error is not their cause, each for the
	// reason its row gives.
	asymmetric := map[string]bool{CodeMissingField: true, CodeCancelled: true, CodeClosed: true}
	for _, c := range Codes {
		if c.Sentinel != nil {
			if got := Sentinel(CodeOf(c.Sentinel)); got != c.Sentinel {
				t.Errorf("%v → %s → %v; want %v back", c.Sentinel, CodeOf(c.Sentinel), got, c.Sentinel)
			}
			if got := Sentinel(c.Name); got != c.Sentinel {
				t.Errorf("Sentinel(%s) = %v, want %v", c.Name, got, c.Sentinel)
			}
		}
		if c.Cause == nil {
			continue
		}
		if c.Sentinel == c.Cause {
			if got := CodeOf(Sentinel(c.Name)); got != c.Name {
				t.Errorf("%s → %v → %s; want %s back", c.Name, Sentinel(c.Name), got, c.Name)
			}
		} else if !asymmetric[c.Name] {
			t.Errorf("code %s: a client's error matches %v, not its cause %v", c.Name, c.Sentinel, c.Cause)
		}
		for _, err := range []error{c.Cause, fmt.Errorf("backend: %w", c.Cause), errors.Join(errors.New("other"), c.Cause)} {
			if got := CodeOf(err); got != c.Name {
				t.Errorf("CodeOf(%v) = %s, want %s", err, got, c.Name)
			}
		}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&lock.NotLeaderError{LeaderID: "2", LeaderAddr: "h:1"}, CodeNotLeader}, // also matches ErrUnavailable
		{&lock.HeldError{Key: "k", Owner: "o"}, CodeHeld},
		{&lock.DelayedError{Key: "k"}, CodeDelayed}, // also matches ErrNotAcquired
		{fmt.Errorf("backend: %w", &lock.DelayedError{Key: "k"}), CodeDelayed},
		{&lock.UnsupportedError{Backend: "b", Feature: lock.FeatureWatch}, CodeUnsupported},
		{normalizeErr(lock.AcquireOptions{Permits: -1}), CodeInvalidPermits},
		{normalizeErr(lock.AcquireOptions{Permits: lock.MaxPermits + 1}), CodeInvalidPermits},
		{normalizeErr(lock.AcquireOptions{Mode: 7}), CodeInvalidMode},
		{normalizeErr(lock.AcquireOptions{LockDelay: -1}), CodeInvalidLockDelay},
		{normalizeErr(lock.AcquireOptions{LockDelay: lock.MaxLockDelay + 1}), CodeInvalidLockDelay},
		{fmt.Errorf("sem: %w", lock.ErrPermitsMismatch), CodePermitsMismatch},
		{lock.ErrWatchOverflow, CodeWatchOverflow},
		{kit.ValidateKeys(nil), CodeInvalidKeys},
		{kit.ValidateKeys([]string{"a", "a"}), CodeInvalidKeys},
		{kit.ValidateKeys([]string{""}), CodeInvalidKey},
		{kit.ValidateKey(""), CodeInvalidKey},
		{context.Canceled, CodeCancelled},
		{context.DeadlineExceeded, CodeUnavailable}, // outcome unknown
		{errors.New("a backend's own error"), CodeUnavailable},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// normalizeErr is the error Normalize gives opts for key "k".
func normalizeErr(opts lock.AcquireOptions) error {
	_, err := kit.Normalize(opts, "k", "o")
	return err
}

// TestSessionCodes: a refused session keep-alive (kit.SessionRefused's
// error, which matches ErrNotHeld too) is session_expired, not not_held;
// a plain not-held stays not_held.
func TestSessionCodes(t *testing.T) {
	s := kit.NewSession(kit.SessionGrant{ID: "s", TTL: time.Hour, Sent: time.Now()})
	defer s.End(nil)
	refused := kit.SessionRefused(s, errors.New("gone"))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refused, CodeSessionExpired},
		{fmt.Errorf("renew: %w", lock.ErrSessionExpired), CodeSessionExpired},
		{fmt.Errorf("%w: lease", lock.ErrNotHeld), CodeNotHeld},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	if Status(CodeSessionExpired) != Status(CodeNotHeld) {
		t.Errorf("session_expired is HTTP %d, not_held %d: they must be equal", Status(CodeSessionExpired), Status(CodeNotHeld))
	}
}
