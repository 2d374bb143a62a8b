package fencedstore

import "fmt"

// run is the writer goroutine: one batch, one append, one fsync at a time.
func (s *Store) run() {
	defer close(s.done)
	batch := make([]*pending, 0, 64)
	for {
		p, ok := <-s.queue
		if !ok {
			return
		}
		batch = append(batch[:0], p)
		bytes := len(p.req.Data)
		open := true
	drain:
		for open && len(batch) < s.maxBatch && bytes < maxBatchBytes {
			select {
			case p, open = <-s.queue:
				if open {
					batch = append(batch, p)
					bytes += len(p.req.Data)
				}
			default:
				break drain
			}
		}
		s.commit(batch)
		clear(batch)
		if cap(s.buf) > 2*maxBatchBytes {
			s.buf = nil // let a rare huge batch's buffer go
		}
		if !open {
			return
		}
	}
}

// commit decides the batch in order, appends it, fsyncs, publishes the new
// state and answers every caller.
func (s *Store) commit(batch []*pending) {
	if err := s.Err(); err != nil {
		for _, p := range batch {
			p.res <- outcome{err: fmt.Errorf("fencedstore: store failed earlier: %w", err)}
		}
		return
	}
	s.buf = s.buf[:0]
	n := 0
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.skip, p.out = true, outcome{err: err}
			continue
		}
		key, tok := p.req.Token.Key, p.req.Token.Value
		rec := logRecord{kind: kindAccepted, token: tok, key: key, clientID: p.req.ClientID, data: p.req.Data}
		h, seen := s.highest[key]
		if seen && tok < h {
			p.stale = &StaleTokenError{Key: key, Token: tok, Highest: h}
			rec.kind, rec.data = kindRejected, ""
			p.out = outcome{err: p.stale}
		} else {
			s.highest[key] = tok
			p.out = outcome{result: WriteResult{Seq: s.seq + 1, Previous: h}}
		}
		s.seq++
		n++
		s.buf = appendRecord(s.buf, s.seed, &rec)
	}
	if n > 0 {
		err := s.append(s.buf)
		if err != nil {
			s.logger.Error("fenced store: write failed; refusing further writes until restart", "path", s.path, "err", err)
			s.mu.Lock()
			s.failed = err
			s.mu.Unlock()
			for _, p := range batch {
				if !p.skip {
					p.out = outcome{err: fmt.Errorf("fencedstore: write not durable: %w", err)}
				}
				p.res <- p.out
			}
			return
		}
	}
	s.mu.Lock()
	for _, p := range batch {
		switch {
		case p.skip:
		case p.stale != nil:
			s.rejected++
			s.rejectedByKey[p.req.Token.Key]++
		default:
			s.accepted++
			s.records[p.req.Token.Key] = Record{Key: p.req.Token.Key, Data: p.req.Data, ClientID: p.req.ClientID, Token: p.req.Token}
		}
	}
	s.mu.Unlock()
	for _, p := range batch {
		p.res <- p.out
	}
}

// append writes b at the end of the file and makes it durable.
func (s *Store) append(b []byte) error {
	if _, err := s.f.Write(b); err != nil {
		return err
	}
	return s.sync(s.f)
}
