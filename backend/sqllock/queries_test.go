package sqllock

import (
	"reflect"
	"strings"
	"testing"
)

// Every statement comes out of newQueries with its names and fragments
// filled in: a placeholder left behind (a fragment that itself names a
// table, say, which the one-pass replacer would not fill) is a syntax
// error only PostgreSQL would report. And the two statements that take a
// key row over share takeover.sql's SET list.
func TestQueriesFilledIn(t *testing.T) {
	n, err := parseTable("s.locks")
	if err != nil {
		t.Fatal(err)
	}
	q := newQueries(n)
	v := reflect.ValueOf(q)
	for i := range v.NumField() {
		if s := v.Field(i).String(); s == "" || strings.Contains(s, "{{") {
			t.Errorf("query %s is empty or keeps a placeholder:\n%s", v.Type().Field(i).Name, s)
		}
	}
	set := strings.TrimSuffix(takeoverSQL, "\n")
	for name, s := range map[string]string{"acquire": q.acquire, "acquireAll": q.acquireAll} {
		if !strings.Contains(s, "ON CONFLICT (key) DO UPDATE\n"+set+"\n") {
			t.Errorf("%s lacks the takeover SET list:\n%s", name, s)
		}
	}
}
