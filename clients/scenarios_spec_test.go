package clients_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/internal/wire"
)

// scenario is one file of clients/scenarios: a name (the file's, without
// .json), what it shows, and its steps, which each runner interprets.
type scenario struct {
	Name  string `json:"name"`
	Doc   string `json:"doc"`
	Steps []step `json:"steps"`
}

// step is one step of a scenario. Do names its kind (the vocabulary:
// clients/scenarios/README.md; goSteps implements every kind); the other
// fields are its arguments, zero where a kind does not use them. The JSON
// is decoded strictly: a field that is not below is an error.
type step struct {
	Do   string `json:"do"`
	Note string `json:"note"` // why the step is there; no effect

	// Names: of a client, a lease (or a group of leases, or a leadership,
	// or a pending call), a session, a watch, an observer, and what a step
	// records (a client, a time mark, an event, a session, an ops count).
	Client   string   `json:"client"`
	Lease    string   `json:"lease"`
	Leases   []string `json:"leases"`
	Session  string   `json:"session"`
	Watch    string   `json:"watch"`
	Observer string   `json:"observer"`
	As       string   `json:"as"`

	// Which key: a suffix of the scenario's key ("/1"; "{i}" is the index
	// of count), a literal key, or a key of that many bytes.
	Key      *string  `json:"key"`
	RawKey   *string  `json:"rawKey"`
	KeyBytes int      `json:"keyBytes"`
	Keys     []string `json:"keys"`
	Count    int      `json:"count"`

	// Acquire's options.
	TTLMs       int     `json:"ttlMs"`
	AutoRenew   *bool   `json:"autoRenew"`
	WaitMs      int     `json:"waitMs"`
	Mode        string  `json:"mode"`
	Permits     int     `json:"permits"`
	Value       *string `json:"value"`
	LockDelayMs int     `json:"lockDelayMs"`
	Async       bool    `json:"async"`
	SameAs      string  `json:"sameAs"`

	// Client options.
	Endpoints    string `json:"endpoints"`
	CacheLeases  bool   `json:"cacheLeases"`
	SessionTTLMs int    `json:"sessionTtlMs"`
	KeepAlive    *bool  `json:"keepAlive"`

	// Expectations.
	WithinMs      *int     `json:"withinMs"`
	ExpectError   string   `json:"expectError"`
	Holder        string   `json:"holder"`
	RetryInMaxMs  int      `json:"retryInMaxMs"`
	Above         string   `json:"above"`
	Reason        string   `json:"reason"`
	Ms            int      `json:"ms"`
	Free          bool     `json:"free"`
	Poll          bool     `json:"poll"`
	Waiters       *int     `json:"waiters"`
	Holders       []string `json:"holders"`
	HolderCount   *int     `json:"holderCount"`
	From          string   `json:"from"`
	To            string   `json:"to"`
	MinMs         *int     `json:"minMs"`
	MaxMs         *int     `json:"maxMs"`
	Mark          string   `json:"mark"`
	Before        string   `json:"before"`
	After         string   `json:"after"`
	PlusMs        int      `json:"plusMs"`
	Record        string   `json:"record"`
	EqualsSession string   `json:"equalsSession"`
	Want          []string `json:"want"`
	Hits          *int     `json:"hits"`
	Reclaimed     *int     `json:"reclaimed"`
	Unused        *int     `json:"unused"`
	LeaseCount    *int     `json:"leaseCount"`
	ClientOwn     string   `json:"clientOwn"`
	Op            string   `json:"op"`
	Min           *float64 `json:"min"`
	LessThan      *float64 `json:"lessThan"`
	Type          string   `json:"type"`
	Token         string   `json:"token"`
	Events        []string `json:"events"`
}

type scenarioSet struct {
	Scenarios []scenario
}

// scenarioFile is a scenario's file name: its name, .json.
var scenarioFile = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*\.json$`)

// loadScenarios reads every NAME.json of dir, in the order of the names,
// and checks each against the vocabulary (checkScenario).
func loadScenarios(t *testing.T, dir string) scenarioSet {
	t.Helper()
	set, err := readScenarios(dir)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func readScenarios(dir string) (scenarioSet, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return scenarioSet{}, err
	}
	var set scenarioSet
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		if !scenarioFile.MatchString(e.Name()) {
			return set, fmt.Errorf("%s: a scenario's file is its name (lower case, digits, -) and .json", e.Name())
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return set, err
		}
		var s scenario
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return set, fmt.Errorf("%s: %w", e.Name(), err)
		}
		if err := checkScenario(s, strings.TrimSuffix(e.Name(), ".json")); err != nil {
			return set, fmt.Errorf("%s: %w", e.Name(), err)
		}
		set.Scenarios = append(set.Scenarios, s)
	}
	if len(set.Scenarios) == 0 {
		return set, fmt.Errorf("%s: no scenario (NAME.json)", dir)
	}
	return set, nil
}

// checkScenario checks what can be checked without running s: its name is
// its file's, it has steps, every step's kind is one of the vocabulary,
// and every error code it expects is in the protocol's table.
func checkScenario(s scenario, file string) error {
	if s.Name != file {
		return fmt.Errorf("name %q, want the file's name %q", s.Name, file)
	}
	if len(s.Steps) == 0 {
		return fmt.Errorf("scenario %s has no steps", s.Name)
	}
	for i, st := range s.Steps {
		if _, ok := goSteps[st.Do]; !ok {
			return fmt.Errorf("step %d: unknown kind %q", i+1, st.Do)
		}
		if st.ExpectError != "" {
			if _, ok := wire.Lookup(st.ExpectError); !ok {
				return fmt.Errorf("step %d: expectError %q is not a code of the protocol's table (internal/wire)", i+1, st.ExpectError)
			}
		}
	}
	return nil
}

// TestScenarioFiles: the scenario files parse and use only the vocabulary,
// and the vocabulary's README documents every kind the Go runner knows.
func TestScenarioFiles(t *testing.T) {
	set := loadScenarios(t, "scenarios")
	t.Logf("%d scenarios", len(set.Scenarios))
	readme, err := os.ReadFile(filepath.Join("scenarios", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for k := range goSteps {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		if !bytes.Contains(readme, []byte("`"+k+"`")) {
			t.Errorf("clients/scenarios/README.md does not document the step kind `%s`", k)
		}
	}
	for _, bad := range []struct{ name, json string }{
		{"unknown kind", `{"name":"x","steps":[{"do":"teleport"}]}`},
		{"unknown field", `{"name":"x","steps":[{"do":"mark","as":"m","colour":"red"}]}`},
		{"unknown code", `{"name":"x","steps":[{"do":"release","lease":"a","expectError":"nope"}]}`},
		{"wrong name", `{"name":"y","steps":[{"do":"mark","as":"m"}]}`},
		{"no steps", `{"name":"x","steps":[]}`},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte(bad.json), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readScenarios(dir); err == nil {
			t.Errorf("%s: a scenario file %s was accepted", bad.name, bad.json)
		}
	}
}
