package proxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// TestProxyCutHeal: bytes flow through a proxy; Cut drops the open
// connection and refuses new ones; Heal serves again on the same address.
func TestProxyCutHeal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					c.Write(append(sc.Bytes(), '\n'))
				}
			}()
		}
	}()
	ps := NewProxies()
	defer ps.Close()
	p, err := ps.Add("echo", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	echo := func() (net.Conn, error) {
		c, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			c.Close()
			return nil, err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || line != "ping\n" {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	c, err := echo()
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	addr := p.Addr()
	p.Cut()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("an open connection survived the cut")
	}
	c.Close()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a new connection got through a cut proxy")
	}
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("healed on %s, want %s", p.Addr(), addr)
	}
	c, err = echo()
	if err != nil {
		t.Fatalf("after heal: %v", err)
	}
	c.Close()
}
