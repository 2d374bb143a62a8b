package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Read parses an audit log: one JSON event per line, blank lines skipped.
// On a line that does not parse it returns the events before it and an
// error naming the line.
func Read(r io.Reader) ([]Event, error) {
	br := bufio.NewReader(r)
	var evs []Event
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var e Event
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				return evs, fmt.Errorf("audit log line %d: %w", n, jerr)
			}
			evs = append(evs, e)
		}
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return evs, fmt.Errorf("audit log line %d: %w", n, err)
		}
	}
}

// ReadFile is Read of the file at path (one file: the rotated ones are
// path.1, path.2, …, oldest last).
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	evs, err := Read(f)
	if err != nil {
		return evs, fmt.Errorf("%s: %w", path, err)
	}
	return evs, nil
}
