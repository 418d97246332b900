package shortlink

import "testing"

// privateTarget reads a host as a browser would before deciding: every
// spelling of a loopback or private address is one, and a name is a name.
func TestPrivateTargetReadsHostsAsBrowsersDo(t *testing.T) {
	t.Parallel()
	for host, private := range map[string]bool{
		"127.0.0.1": true, "127.1": true, "2130706433": true, "0x7f000001": true, "0x7f.0.0.1": true,
		"0177.0.0.1": true, "::1": true, "::ffff:127.0.0.1": true, "::ffff:10.0.0.1": true,
		"169.254.169.254": true, "fe80::1%eth0": true, "64:ff9b::a9fe:a9fe": true, "fd00:ec2::254": true,
		"10.0.0.1": true, "172.16.0.1": true, "192.168.0.1": true, "100.64.0.1": true, "0.0.0.0": true, "0": true,
		"::": true, "224.0.0.1": true, "255.255.255.255": true, "ff02::1": true,
		"localhost": true, "LocalHost.": true, "a.b.localhost": true, "metadata.google.internal": true,
		"1.2.3.4.5": true, "10.0.0.08": true, "0x": true, "99999999999999999999999": true,
		"8.8.8.8": false, "172.32.0.1": false, "2001:db8::1": false, "book.example.test": false,
		"localhost.example.test": false, "10.0.0.1.example.test": false, "0x7f.example": false,
		"internal.example.test": false, "1e100.net": false,
	} {
		if got := privateTarget(host) != ""; got != private {
			t.Errorf("privateTarget(%q) = %q, want private=%v", host, privateTarget(host), private)
		}
	}
}
