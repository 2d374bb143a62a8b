package wire

// scanner reads the subset of JSON the fast decoders accept. Every method
// reports false for anything outside it; the caller then falls back.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c (after white space).
func (s *scanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string of plain characters (no escapes, ASCII only). The
// result aliases the input.
func (s *scanner) str() ([]byte, bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		if c == '"' {
			s.i = j + 1
			return s.b[start:j], true
		}
		// < > & are plain for the decoder; control characters, escapes
		// and non-ASCII bytes are left to encoding/json.
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return nil, false
		}
	}
	return nil, false
}

// digits reads an unsigned integer of at most max digits without leading
// zeros, followed by a delimiter.
func (s *scanner) digits(max int) (uint64, bool) {
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + uint64(s.b[s.i]-'0')
		s.i++
	}
	n := s.i - start
	if n == 0 || n > max || n > 1 && s.b[start] == '0' {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ' ', '\t', '\n', '\r':
		default:
			return 0, false // a fraction, an exponent, or garbage
		}
	}
	return v, true
}

// int reads an integer of at most max digits (18 fit an int64, 9 an int
// on any platform).
func (s *scanner) int(max int) (int64, bool) {
	s.space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	v, ok := s.digits(max)
	if neg {
		return -int64(v), ok
	}
	return int64(v), ok
}

// text reads a string as str does, as a string.
func (s *scanner) text() (string, bool) {
	str, ok := s.str()
	return string(str), ok
}

// smallInt reads an integer of at most 9 digits, as an int.
func (s *scanner) smallInt() (int, bool) {
	v, ok := s.int(9)
	return int(v), ok
}

func (s *scanner) uint() (uint64, bool) {
	s.space()
	return s.digits(19)
}

func (s *scanner) bool() (bool, bool) {
	s.space()
	switch {
	case hasPrefix(s.b[s.i:], "true"):
		s.i += 4
		return true, s.delim()
	case hasPrefix(s.b[s.i:], "false"):
		s.i += 5
		return false, s.delim()
	}
	return false, false
}

// delim reports whether the next byte ends a value.
func (s *scanner) delim() bool {
	if s.i >= len(s.b) {
		return true
	}
	switch s.b[s.i] {
	case ',', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// object reads {"name": value, ...}, calling field for each member with
// the scanner before the value; field reads the value. It fails on a
// repeated name (seen by field's index).
func (s *scanner) object(field func(name []byte) (index int, ok bool)) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	var seen uint32
	for {
		name, ok := s.str()
		if !ok || !s.byte(':') {
			return false
		}
		idx, ok := field(name)
		if !ok || seen&(1<<idx) != 0 {
			return false
		}
		seen |= 1 << idx
		if s.byte(',') {
			continue
		}
		return s.byte('}')
	}
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// strings reads an array of plain strings (as str reads them); [] gives an
// empty, non-nil slice, as encoding/json does.
func (s *scanner) strings() ([]string, bool) {
	if !s.byte('[') {
		return nil, false
	}
	out := []string{}
	if s.byte(']') {
		return out, true
	}
	for {
		str, ok := s.text()
		if !ok {
			return nil, false
		}
		out = append(out, str)
		if s.byte(',') {
			continue
		}
		return out, s.byte(']')
	}
}

// fencingToken reads {"key": "...", "value": n} (either order, both
// optional) or a bare n, as FencingToken.UnmarshalJSON reads them.
func (s *scanner) fencingToken() (*FencingToken, bool) {
	t := &FencingToken{}
	s.space()
	if s.i < len(s.b) && s.b[s.i] != '{' {
		v, ok := s.uint()
		t.Value = v
		return t, ok
	}
	ok := s.object(func(name []byte) (int, bool) {
		var ok bool
		switch string(name) {
		case "key":
			t.Key, ok = s.text()
			return 0, ok
		case "value":
			t.Value, ok = s.uint()
			return 1, ok
		}
		return 0, false
	})
	return t, ok
}
