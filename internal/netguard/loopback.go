package netguard

import "net"

// Loopback reports whether addr (host:port) is on the loopback interface:
// 127.0.0.0/8, ::1 or "localhost". An empty host, the wildcards and other
// names are not: any host may reach them. The servers that relax their
// authentication for local development (plaintext Raft, open membership,
// the fenced store without tokens) do so only where this holds.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
