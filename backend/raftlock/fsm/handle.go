package fsm

// Lease handles: their packed storage in a record and constant-time
// comparison.

const hexDigits = "0123456789abcdef"

// packHandle stores a handle of 32 lowercase hex chars (what lock.NewHandle
// makes) as 16 bytes; any other handle is kept as the string.
func packHandle(h string) (raw [16]byte, str string) {
	if len(h) != 32 {
		return raw, h
	}
	for i := range raw {
		hi, lo := unhex(h[2*i]), unhex(h[2*i+1])
		if hi > 15 || lo > 15 {
			return [16]byte{}, h
		}
		raw[i] = hi<<4 | lo
	}
	return raw, ""
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 255
}

// handleIs reports whether h is r's handle, without allocating, in time
// that depends only on the lengths: the handle is the lease's secret, and
// an early exit at the first wrong character would let a client measure
// how much of a guess was right. (The length is no secret: handles are
// 32 to 64 hex characters.)
func (r *record) handleIs(h string) bool {
	if hs := r.hstr(); hs != "" {
		return EqualHandles(hs, h)
	}
	if len(h) != 32 {
		return false
	}
	var diff byte
	for i, b := range r.h {
		diff |= h[2*i] ^ hexDigits[b>>4]
		diff |= h[2*i+1] ^ hexDigits[b&15]
	}
	return diff == 0
}

// EqualHandles compares two lease handles in constant time for a given
// length (as crypto/subtle.ConstantTimeCompare, without converting the
// strings to byte slices).
func EqualHandles(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var diff byte
	for i := 0; i < len(a); i++ {
		diff |= a[i] ^ b[i]
	}
	return diff == 0
}

// handle returns r's handle as a string.
func (r *record) handle() string {
	if hs := r.hstr(); hs != "" {
		return hs
	}
	var b [32]byte
	for i, c := range r.h {
		b[2*i], b[2*i+1] = hexDigits[c>>4], hexDigits[c&15]
	}
	return string(b[:])
}
