package wire

import (
	"errors"
	"io"
)

// MaxKeptFrameBuffer bounds the buffer a connection keeps between frames
// (ReadFrame): an unusually large frame's buffer is let go after use.
const MaxKeptFrameBuffer = 4 << 10

// ErrFrameTooLarge is ReadFrame's error for a frame over its limit.
var ErrFrameTooLarge = errors.New("wire: frame over the size limit")

// ReadFrame reads one frame's payload from r into buf (from its start),
// growing it as needed, and returns it: as io.ReadAll, but reusing the
// caller's buffer from one frame to the next instead of allocating one per
// frame. The result is valid until the next call with the same buffer; the
// decoders copy what they keep. With limit >= 0, a payload of more than
// limit bytes gives ErrFrameTooLarge (having read limit+1 of them).
func ReadFrame(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	buf = buf[:0]
	if cap(buf) < 512 {
		buf = make([]byte, 0, 512)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := buf[len(buf):cap(buf)]
		if limit >= 0 && int64(len(buf)+len(room)) > limit+1 {
			room = room[:limit+1-int64(len(buf))]
		}
		n, err := r.Read(room)
		buf = buf[:len(buf)+n]
		if limit >= 0 && int64(len(buf)) > limit {
			return buf, ErrFrameTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
