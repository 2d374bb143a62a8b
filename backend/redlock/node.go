package redlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one Redis master: a client for commands and one PubSub
// connection for the release channels that this Locker's waiters watch and
// for the Locker's own wanted channel.
type node struct {
	l      *Locker
	idx    int
	addr   string // named in errors
	client *redis.Client
	ps     *redis.PubSub

	// subscription bookkeeping, guarded by l.mu: how many SUBSCRIBE
	// commands were written per channel, and how many were confirmed.
	// Confirmations arrive in order on the one connection, so a waiter
	// whose SUBSCRIBE was the k-th is subscribed once k are confirmed.
	sent, confirmed map[string]uint64
	// wantConfirmed: the node confirmed the Locker's wanted channel once
	// (guarded by l.mu).
	wantConfirmed bool

	qmu   sync.Mutex
	queue []psCmd
	kick  chan struct{}
	done  chan struct{} // closed when both goroutines have exited
	wg    sync.WaitGroup
}

type psCmd struct {
	// own: subscribe the Locker's wanted channel, which is never
	// unsubscribed (go-redis resubscribes it after a reconnect).
	own       bool
	subscribe bool
	channel   string
	st        *channelState
}

func newNode(l *Locker, idx int, addr string) *node {
	to := l.cfg.NodeTimeout
	client := redis.NewClient(&redis.Options{
		Addr:                  addr,
		Username:              l.cfg.Username,
		Password:              l.cfg.Password,
		Protocol:              2,
		DialTimeout:           to,
		ReadTimeout:           to,
		WriteTimeout:          to,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // Redlock counts a failed request; it never re-sends one
		PoolSize:              l.cfg.PoolSize,
		DisableIdentity:       true,
	})
	return &node{
		l:         l,
		idx:       idx,
		addr:      addr,
		client:    client,
		ps:        client.Subscribe(context.Background()),
		sent:      map[string]uint64{},
		confirmed: map[string]uint64{},
		kick:      make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
}

func (n *node) start() {
	n.wg.Add(2)
	go n.receiveLoop()
	go n.commandLoop()
}

func (n *node) close() error {
	err := n.ps.Close()
	n.wg.Wait()
	if cerr := n.client.Close(); err == nil {
		err = cerr
	}
	return err
}

// enqueue schedules a SUBSCRIBE or UNSUBSCRIBE on the PubSub connection.
// Commands run in order on one goroutine so that the count of written
// SUBSCRIBEs matches the order of their confirmations.
func (n *node) enqueue(c psCmd) {
	n.qmu.Lock()
	n.queue = append(n.queue, c)
	n.qmu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *node) commandLoop() {
	defer n.wg.Done()
	l := n.l
	for {
		select {
		case <-n.kick:
		case <-l.ctx.Done():
			return
		}
		for {
			n.qmu.Lock()
			if len(n.queue) == 0 {
				n.qmu.Unlock()
				break
			}
			c := n.queue[0]
			n.queue = n.queue[1:]
			n.qmu.Unlock()
			ctx, cancel := context.WithTimeout(l.ctx, backgroundTimeoutNodes*l.cfg.NodeTimeout)
			if c.own {
				// On an error the PubSub still records the channel and
				// subscribes it when its connection comes back.
				n.ps.Subscribe(ctx, c.channel)
			} else if c.subscribe {
				l.mu.Lock()
				if l.chans[c.channel] != c.st {
					l.mu.Unlock() // every waiter left already
					cancel()
					continue
				}
				n.sent[c.channel]++
				c.st.target[n.idx] = n.sent[c.channel]
				n.checkReadyLocked(c.channel, c.st)
				l.mu.Unlock()
				if err := n.ps.Subscribe(ctx, c.channel); err != nil {
					l.mu.Lock()
					n.sent[c.channel]--
					l.mu.Unlock()
				}
			} else {
				l.mu.Lock()
				gone := l.chans[c.channel] == nil
				l.mu.Unlock()
				if gone {
					n.ps.Unsubscribe(ctx, c.channel)
				}
			}
			cancel()
		}
	}
}

func (n *node) checkReadyLocked(channel string, st *channelState) {
	if st == nil || st.target[n.idx] == 0 || st.readyClosed[n.idx] {
		return
	}
	if n.confirmed[channel] >= st.target[n.idx] {
		st.readyClosed[n.idx] = true
		close(st.ready[n.idx])
	}
}

func (n *node) receiveLoop() {
	defer n.wg.Done()
	l := n.l
	for {
		msg, err := n.ps.Receive(l.ctx)
		if err != nil {
			if l.ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			// The connection broke (node restarted or unreachable): the
			// next Receive reconnects and resubscribes. Don't spin.
			select {
			case <-l.ctx.Done():
				return
			case <-time.After(l.cfg.NodeTimeout):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			l.mu.Lock()
			if m.Channel == l.wantChannel {
				if m.Kind == "subscribe" {
					l.wantConfirmedLocked(n)
				}
				l.mu.Unlock()
				continue
			}
			switch m.Kind {
			case "subscribe":
				n.confirmed[m.Channel]++
				n.checkReadyLocked(m.Channel, l.chans[m.Channel])
			case "unsubscribe":
				if l.chans[m.Channel] == nil && n.confirmed[m.Channel] >= n.sent[m.Channel] {
					delete(n.confirmed, m.Channel)
					delete(n.sent, m.Channel)
				}
			}
			l.mu.Unlock()
		case *redis.Message:
			if m.Channel == l.wantChannel {
				if turn, ok := strings.CutPrefix(m.Payload, "!"); ok {
					released, key, _ := strings.Cut(turn, " ")
					l.turn(key, released)
				} else {
					l.wantedMessage(m.Payload)
				}
				continue
			}
			tok, _ := strconv.ParseUint(m.Payload, 10, 64)
			l.deliver(m.Channel, tok, n.idx)
		}
	}
}
