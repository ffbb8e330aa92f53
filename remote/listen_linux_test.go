//go:build linux

package remote

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// boundSockets returns the sockets this process holds that accept traffic from others:
// TCP sockets listening and UDP sockets bound to a local port, as "tcp 127.0.0.1:4222"
// keyed by inode. The kernel lists the network namespace's sockets in /proc/net/{tcp,udp}{,6};
// this process's are those whose inodes its file descriptors name (socket:[inode]).
func boundSockets(t *testing.T) map[string]string {
	t.Helper()
	mine := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	out := map[string]string{}
	for _, table := range []struct {
		file, proto string
		state       string // the state of a socket others can reach: TCP_LISTEN, or TCP_CLOSE for an unconnected UDP socket
	}{
		{"/proc/net/tcp", "tcp", "0A"}, {"/proc/net/tcp6", "tcp", "0A"},
		{"/proc/net/udp", "udp", "07"}, {"/proc/net/udp6", "udp", "07"},
	} {
		f, err := os.Open(table.file)
		if os.IsNotExist(err) {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				t.Fatalf("%s: line %q", table.file, sc.Text())
			}
			if fields[3] != table.state || !mine[fields[9]] {
				continue
			}
			out[fields[9]] = table.proto + " " + procAddr(t, fields[1])
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// procAddr decodes a /proc/net address, "0100007F:1F90" (IPv4) or 32 hex digits and a port
// (IPv6): the address is in 32-bit words of host byte order, the port in hex.
func procAddr(t *testing.T, s string) string {
	t.Helper()
	a, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(a)
	port, perr := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || perr != nil || len(raw)%4 != 0 {
		t.Fatalf("/proc/net address %q", s)
	}
	for i := 0; i < len(raw); i += 4 { // host (little-endian) words to network order
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)).String()
}

// TestListensOnlyOnAddr: the embedded server opens one listening socket, on the configured
// address and port (loopback by default), and nothing else — no monitoring, cluster,
// leaf-node or websocket port, no wildcard address, no UDP — and closes it with the Server.
func TestListensOnlyOnAddr(t *testing.T) {
	cert, key := selfSigned(t, t.TempDir())
	cases := []struct {
		name string
		cfg  ServeConfig
		host string // the listening socket's
	}{
		{"default", ServeConfig{}, "127.0.0.1"},
		{"127.0.0.1:0", ServeConfig{Addr: "127.0.0.1:0"}, "127.0.0.1"},
		{"fixed port", ServeConfig{Addr: freePort(t, "127.0.0.1")}, "127.0.0.1"},
		{"tls", ServeConfig{Addr: "127.0.0.1:0", TLSCert: cert, TLSKey: key}, "127.0.0.1"},
	}
	if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		l.Close()
		cases = append(cases, struct {
			name string
			cfg  ServeConfig
			host string
		}{"[::1]:0", ServeConfig{Addr: "[::1]:0"}, "::1"})
	} else {
		t.Logf("no IPv6 loopback here (%v): the [::1] case is left out", err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := boundSockets(t)
			s := serve(t, tc.cfg)
			var opened []string
			for inode, sock := range boundSockets(t) {
				if _, ok := before[inode]; !ok {
					opened = append(opened, sock)
				}
			}
			_, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(s.URL(), "nats://"), "tls://"))
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"tcp " + net.JoinHostPort(tc.host, port)}
			if tc.cfg.Addr != "" && !strings.HasSuffix(tc.cfg.Addr, ":0") && !strings.HasSuffix(tc.cfg.Addr, ":"+port) {
				t.Errorf("serving on port %s, configured %s", port, tc.cfg.Addr)
			}
			if !slices.Equal(opened, want) {
				t.Fatalf("Serve(%q) opened %v, want only %v", tc.cfg.Addr, opened, want)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if after := boundSockets(t); !maps.Equal(after, before) {
				t.Errorf("after Close: %v, before Serve: %v", after, before)
			}
		})
	}
}

// freePort is host:port with a port nothing listens on now.
func freePort(t *testing.T, host string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr())
}
