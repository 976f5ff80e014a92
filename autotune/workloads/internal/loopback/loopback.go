// Package loopback is the one definition of "loopback only" for the demo service and the load
// generator: traffic and listeners of autotune's local stack stay on this machine's loopback
// interface. Both used to decide on their own and disagreed on "LOCALHOST".
package loopback

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Host reports whether host names a loopback address: 127.0.0.0/8, ::1, or the name
// localhost (any case: DNS names are case-insensitive, RFC 4343). Names other than localhost
// are refused rather than resolved: a resolver can answer anything.
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// CheckListen accepts host:port listen addresses on loopback only, with a valid port.
func CheckListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("bad port %q", port)
	}
	if !Host(host) {
		return fmt.Errorf("refusing to listen on %q: only loopback addresses (127.0.0.0/8, ::1, localhost) are allowed", host)
	}
	return nil
}
