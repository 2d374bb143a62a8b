package deploy

import (
	"encoding/json"
	"os"
	"testing"
)

// dashboardFile is the Grafana dashboard, imported as it is (Dashboards →
// New → Import); its Prometheus is a template variable.
const dashboardFile = "grafana/lockgate.json"

type gridPos struct{ H, W, X, Y int }

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	GridPos    gridPos         `json:"gridPos"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		RefID      string          `json:"refId"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// TestGrafanaDashboard: the dashboard is a Grafana dashboard that imports
// anywhere: a uid and a title, its Prometheus chosen by a datasource
// variable (no data source uid of ours), unique panel ids, panels within
// the 24-column grid that do not overlap, and every panel querying. Which
// metrics it queries is TestMetricsExported's.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("uid %q, title %q, schemaVersion %d: all are needed", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("no datasource variable: the dashboard would be bound to one Prometheus")
	}
	const ds = `{"type":"prometheus","uid":"${datasource}"}`
	isDS := func(raw json.RawMessage) bool {
		var d struct{ Type, UID string }
		return json.Unmarshal(raw, &d) == nil && d.Type == "prometheus" && d.UID == "${datasource}"
	}
	ids := map[int]string{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
			}
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if o, ok := taken[cell{x, y}]; ok {
						t.Errorf("panel %q overlaps %q at (%d, %d)", p.Title, o, x, y)
						return
					}
					taken[cell{x, y}] = p.Title
				}
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("panel %d (%q): a title and a query are needed", p.ID, p.Title)
			}
			if !isDS(p.Datasource) {
				t.Errorf("panel %q: datasource %s, want %s", p.Title, p.Datasource, ds)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" || !isDS(tg.Datasource) {
					t.Errorf("panel %q: a target without expr, refId or the datasource variable: %+v", p.Title, tg)
				}
			}
		}
	}
	walk(d.Panels)
	if len(ids) < 20 {
		t.Errorf("%d panels", len(ids))
	}
}
