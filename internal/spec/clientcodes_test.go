package spec

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/internal/wire"
)

// TestTypeScriptErrorCodes: the TypeScript client's ErrorCodes list holds
// exactly the codes of the protocol's table (internal/wire), so that a new
// code cannot be forgotten in one language (forbidden once was).
func TestTypeScriptErrorCodes(t *testing.T) {
	src, err := os.ReadFile("../../clients/js/src/errors.ts")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)export const ErrorCodes = \[(.*?)\] as const`).FindSubmatch(src)
	if block == nil {
		t.Fatal("clients/js/src/errors.ts has no `export const ErrorCodes = [...] as const`")
	}
	var ts []string
	for _, m := range regexp.MustCompile(`"([a-z_]+)"`).FindAllSubmatch(block[1], -1) {
		ts = append(ts, string(m[1]))
	}
	var want []string
	for _, c := range wire.Codes {
		want = append(want, c.Name)
	}
	slices.Sort(ts)
	slices.Sort(want)
	if !slices.Equal(ts, want) {
		var missing, extra []string
		for _, c := range want {
			if !slices.Contains(ts, c) {
				missing = append(missing, c)
			}
		}
		for _, c := range ts {
			if !slices.Contains(want, c) {
				extra = append(extra, c)
			}
		}
		t.Errorf("clients/js/src/errors.ts ErrorCodes: missing %s; not in the protocol's table: %s",
			strings.Join(missing, ", "), strings.Join(extra, ", "))
	}
}
