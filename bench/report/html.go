// Package report holds what every bench report shares: the latency
// histograms and their percentiles, the self-contained HTML page (ECharts
// inlined) and its tables, and writing a report to a file.
package report

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"strings"

	"github.com/go-echarts/go-echarts/v2/components"
)

// WriteFile writes the report to path with write (WriteJSON or WriteHTML).
func WriteFile(path string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// echartsJS is Apache ECharts 5.6.0 (assets/ECHARTS-LICENSE), gzipped: it is
// inlined into the HTML report so that the report is one self-contained
// file that renders without a network.
//
//go:embed assets/echarts.min.js.gz
var echartsJSgz []byte

const (
	echartsAsset = "echarts.min.js"
	// inlineHost is the asset host the page is rendered with: a name that
	// never resolves (RFC 2606), replaced by the inlined library.
	inlineHost = "https://inline.invalid/"
)

// NewPage returns a page whose ECharts script writeInlined inlines.
func NewPage(title string) *components.Page {
	page := components.NewPage()
	page.SetPageTitle(title)
	page.SetAssetsHost(inlineHost)
	return page
}

// WriteInlined writes a rendered go-echarts page with the ECharts library
// inlined in place of its script tag, and header inserted at the top of
// the body.
func WriteInlined(w io.Writer, page, header string) error {
	return WriteInlinedFooter(w, page, header, "")
}

// WriteInlinedFooter is WriteInlined with footer inserted at the end of
// the body, after the charts.
func WriteInlinedFooter(w io.Writer, page, header, footer string) error {
	js, err := gunzip(echartsJSgz)
	if err != nil {
		return err
	}
	tag := `<script src="` + inlineHost + echartsAsset + `"></script>`
	if !strings.Contains(page, tag) {
		return fmt.Errorf("bench: report template changed: no %s script tag to inline", echartsAsset)
	}
	page = strings.Replace(page, tag, "<script>"+strings.ReplaceAll(string(js), "</script", `<\/script`)+"</script>", 1)
	page = strings.Replace(page, "<body>", "<body>\n"+header, 1)
	if footer != "" {
		i := strings.LastIndex(page, "</body>")
		if i < 0 {
			return errors.New("bench: report template changed: no </body> to put the footer before")
		}
		page = page[:i] + footer + "\n" + page[i:]
	}
	_, err = io.WriteString(w, page)
	return err
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

func RoundTo(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// HTMLTable is a table with id, a header row head, and rows.
func HTMLTable(id string, head []string, rows [][]string) string {
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, `<table id="%s" style="border-collapse:collapse;font-size:13px" border="1" cellpadding="4"><tr>`, esc(id))
	for _, h := range head {
		fmt.Fprintf(&b, "<th>%s</th>", esc(strings.ToLower(h)))
	}
	b.WriteString("</tr>\n")
	for _, row := range rows {
		b.WriteString("<tr>")
		for _, c := range row {
			fmt.Fprintf(&b, "<td>%s</td>", esc(c))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
	return b.String()
}

func YesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
