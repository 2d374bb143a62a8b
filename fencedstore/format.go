package fencedstore

// The data file is a header followed by an append-only sequence of records.
//
//	header: "LGFS" | version (1 byte) | 3 zero bytes | salt (8 bytes, LE)
//	record: length (4 bytes, LE) | CRC-32C (4 bytes, LE) | payload (length bytes)
//
// The CRC covers salt | length | payload. The salt is random per file, so a
// record embedded in a client's data (or copied from another file) never has
// a valid checksum here; that keeps the resynchronising scan of replay honest.
//
//	payload: kind (1 byte) | token (8 bytes, LE) | uvarint len | key
//	         | uvarint len | clientID [ | uvarint len | data ]   (data: accepted only)
//
// Kind 1 is an accepted write; kind 2 a rejected (stale) one, logged so the
// rejection counters survive restarts.
//
// # Torn tail or corruption
//
// Replay must tell a write cut short by a crash (never acknowledged: cut it
// off) from damage to bytes that were once written whole (possibly an
// acknowledged write: refuse to open, never guess). The rule:
//
//   - A record is complete when its length field is in range and the
//     record it announces fits in the file. Only an incomplete last record
//     (the file ends inside its frame or its payload) is a torn tail.
//   - A complete record whose checksum fails is corruption when it ends
//     exactly at the end of the file or when a valid record follows
//     anywhere after it. A damaged record followed only by bytes that are
//     no record (a frame that runs past the end, zeros, noise) is still
//     treated as the torn tail of the last batch.
//
// Why a crash does not leave a complete last record with bad content: the
// writer (writer.go) appends a whole batch with one write(2) and answers no
// caller before the fsync that follows returns. What a crash leaves of an
// unsynced batch is what reached the disk: with ext4 (data=ordered, the
// default) and XFS, the size on disk grows only as the data I/O completes,
// so the file ends inside the batch (a record cut short) or at its end
// (whole records). A filesystem that could persist the size first shows
// zeros (a length of 0, below minPayload: not a frame) or, with ext4
// data=writeback, stale blocks, whose first four bytes would have to be a
// length landing exactly on the end of the file (one value in 2^32) or be
// followed by an intact, correctly salted record to be taken for
// corruption. Only such a filesystem, persisting the size and the first
// pages of a multi-page record but not its later ones, could make a crash
// look like corruption; that mistake costs a refusal to start naming the
// offset, never lost data. A complete last record with a bad checksum is therefore a
// bit flip on disk or in memory, or an edit, of a write that was fsynced,
// probably acknowledged, and possibly the highest token of its key:
// dropping it would let a stale writer in. So Open refuses it; an operator
// who knows it was never acknowledged truncates the file to the offset
// named in the error.
//
// What this cannot catch: damage to the length field of the last record
// that makes it run past the end of the file looks exactly like a cut-short
// write and is cut off as a torn tail.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

const (
	fileMagic   = "LGFS"
	fileVersion = 1
	headerSize  = 16
	frameSize   = 8 // length + CRC

	kindAccepted = 1
	kindRejected = 2

	// minPayload is the smallest valid payload: a rejection with one-byte
	// key and clientID.
	minPayload = 1 + 8 + 1 + 1 + 1 + 1
	// maxPayload bounds a payload: kind, token, three uvarint lengths and
	// the largest key, clientID and data.
	maxPayload = 1 + 8 + 3*binary.MaxVarintLen32 + MaxKeyLen + MaxClientIDLen + MaxDataLen
	// probeSize is enough bytes to check a candidate record's frame and
	// payload layout without its data.
	probeSize = frameSize + 1 + 8 + 3*binary.MaxVarintLen32 + MaxKeyLen + MaxClientIDLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// logRecord is one decoded payload.
type logRecord struct {
	kind     byte
	token    uint64
	key      string
	clientID string
	data     string
}

func encodeHeader(salt uint64) []byte {
	h := make([]byte, headerSize)
	copy(h, fileMagic)
	h[4] = fileVersion
	binary.LittleEndian.PutUint64(h[8:], salt)
	return h
}

// parseHeader checks the header and returns the file's CRC seed.
func parseHeader(h []byte) (uint32, error) {
	if len(h) < headerSize || string(h[:4]) != fileMagic {
		return 0, fmt.Errorf("%w: not a fenced store file (bad header)", ErrCorrupt)
	}
	if h[4] != fileVersion {
		return 0, fmt.Errorf("%w: unsupported file version %d (want %d)", ErrCorrupt, h[4], fileVersion)
	}
	return crc32.Update(0, castagnoli, h[8:16]), nil
}

// appendRecord appends the framed record to buf.
func appendRecord(buf []byte, seed uint32, r *logRecord) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, frameSize)...)
	buf = append(buf, r.kind)
	buf = binary.LittleEndian.AppendUint64(buf, r.token)
	buf = binary.AppendUvarint(buf, uint64(len(r.key)))
	buf = append(buf, r.key...)
	buf = binary.AppendUvarint(buf, uint64(len(r.clientID)))
	buf = append(buf, r.clientID...)
	if r.kind == kindAccepted {
		buf = binary.AppendUvarint(buf, uint64(len(r.data)))
		buf = append(buf, r.data...)
	}
	n := len(buf) - start - frameSize
	binary.LittleEndian.PutUint32(buf[start:], uint32(n))
	crc := crc32.Update(seed, castagnoli, buf[start:start+4])
	crc = crc32.Update(crc, castagnoli, buf[start+frameSize:])
	binary.LittleEndian.PutUint32(buf[start+4:], crc)
	return buf
}

// checkFrame validates a frame's length against the bytes left in the file.
func checkFrame(frame []byte, off, size int64) (int, bool) {
	n := int64(binary.LittleEndian.Uint32(frame))
	if n < minPayload || n > maxPayload || off+frameSize+n > size {
		return 0, false
	}
	return int(n), true
}

func frameCRC(seed uint32, frame, payload []byte) uint32 {
	crc := crc32.Update(seed, castagnoli, frame[:4])
	return crc32.Update(crc, castagnoli, payload)
}

// layout parses a payload's fields from p, which may stop after the
// clientID, and returns the total payload length they describe.
func layout(p []byte) (total int, ok bool) {
	if len(p) < 9 || (p[0] != kindAccepted && p[0] != kindRejected) {
		return 0, false
	}
	i := 9
	field := func(max uint64, min uint64) bool {
		n, w := binary.Uvarint(p[i:])
		if w <= 0 || n > max || n < min {
			return false
		}
		i += w + int(n)
		return i <= len(p)
	}
	if !field(MaxKeyLen, 1) || !field(MaxClientIDLen, 1) {
		return 0, false
	}
	if p[0] == kindRejected {
		return i, true
	}
	n, w := binary.Uvarint(p[i:])
	if w <= 0 || n > MaxDataLen {
		return 0, false
	}
	return i + w + int(n), true
}

// decodePayload decodes a whole payload whose checksum matched.
func decodePayload(p []byte) (logRecord, error) {
	total, ok := layout(p)
	if !ok || total != len(p) {
		return logRecord{}, errors.New("malformed payload")
	}
	r := logRecord{kind: p[0], token: binary.LittleEndian.Uint64(p[1:9])}
	i := 9
	str := func() string {
		n, w := binary.Uvarint(p[i:])
		s := string(p[i+w : i+w+int(n)])
		i += w + int(n)
		return s
	}
	r.key = str()
	r.clientID = str()
	if r.kind == kindAccepted {
		r.data = str()
	}
	return r, nil
}

// replay reads every record after the header of f (size bytes long) and
// hands it to apply, in order. It returns the offset just past the last good
// record. An incomplete last record, or a damaged one followed by no valid
// record, is a torn tail: replay stops there and the caller truncates. A
// complete record that fails its checksum and ends at the end of the file,
// or any damaged record followed by a valid one, is corruption: an error
// naming the offset (see "Torn tail or corruption" above).
func replay(f *os.File, size int64, seed uint32, apply func(off int64, r logRecord) error) (int64, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, headerSize, size-headerSize), 1<<16)
	off := int64(headerSize)
	frame := make([]byte, frameSize)
	var payload []byte
	for off < size {
		if _, err := io.ReadFull(r, frame); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return damaged(f, off, size, seed)
			}
			return 0, err
		}
		n, ok := checkFrame(frame, off, size)
		if !ok {
			return damaged(f, off, size, seed)
		}
		if cap(payload) < n {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return 0, err // checkFrame saw the bytes in the file
		}
		if frameCRC(seed, frame, payload) != binary.LittleEndian.Uint32(frame[4:]) {
			if end := off + frameSize + int64(n); end == size {
				return 0, fmt.Errorf("%w: the last record, at offset %d (%d bytes, ending exactly at the end of the file), is complete but fails its checksum: "+
					"it was damaged after it was written, not torn by a crash, and may be an acknowledged write; refusing to drop it "+
					"(if you know it was never acknowledged, truncate the file to %d bytes)", ErrCorrupt, off, frameSize+n, off)
			}
			return damaged(f, off, size, seed)
		}
		rec, err := decodePayload(payload)
		if err != nil {
			return 0, fmt.Errorf("%w: record at offset %d has a valid checksum but %v", ErrCorrupt, off, err)
		}
		if err := apply(off, rec); err != nil {
			return 0, fmt.Errorf("%w: record at offset %d: %v", ErrCorrupt, off, err)
		}
		off += frameSize + int64(n)
	}
	return off, nil
}

// damaged decides between a torn tail (return off) and mid-file corruption.
func damaged(f *os.File, off, size int64, seed uint32) (int64, error) {
	q, err := findRecord(f, off+1, size, seed)
	if err != nil {
		return 0, err
	}
	if q >= 0 {
		return 0, fmt.Errorf("%w: damaged record at offset %d is followed by a valid record at offset %d (file size %d); refusing to drop records from the middle of the log",
			ErrCorrupt, off, q, size)
	}
	return off, nil
}

// findRecord returns the first offset >= from where a complete record with a
// valid checksum starts, or -1. It reads through a window and checks only
// candidates whose frame and field lengths agree before computing a CRC.
func findRecord(f io.ReaderAt, from, size int64, seed uint32) (int64, error) {
	const window = 1 << 20
	buf := make([]byte, window+probeSize)
	var bufOff int64
	var bufLen int
	var rec []byte
	for q := from; q+frameSize+minPayload <= size; q++ {
		if q < bufOff || q+probeSize > bufOff+int64(bufLen) && bufOff+int64(bufLen) < size || bufLen == 0 {
			n, err := f.ReadAt(buf, q)
			if err != nil && !errors.Is(err, io.EOF) {
				return 0, err
			}
			bufOff, bufLen = q, n
		}
		b := buf[q-bufOff : bufLen]
		n, ok := checkFrame(b, q, size)
		if !ok {
			continue
		}
		probe := b[frameSize:]
		if len(probe) > n {
			probe = probe[:n]
		}
		if total, ok := layout(probe); !ok || total != n {
			continue
		}
		if cap(rec) < frameSize+n {
			rec = make([]byte, frameSize+n)
		}
		rec = rec[:frameSize+n]
		if _, err := f.ReadAt(rec, q); err != nil {
			return 0, err
		}
		if frameCRC(seed, rec, rec[frameSize:]) == binary.LittleEndian.Uint32(rec[4:]) {
			return q, nil
		}
	}
	return -1, nil
}
