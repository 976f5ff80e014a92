package loopback

import "testing"

func TestHost(t *testing.T) {
	for _, ok := range []string{"127.0.0.1", "127.0.0.2", "::1", "localhost", "LOCALHOST", "LocalHost"} {
		if !Host(ok) {
			t.Errorf("%s refused", ok)
		}
	}
	for _, bad := range []string{"0.0.0.0", "", "10.0.0.1", "example.com", "localhost.example.com", "::"} {
		if Host(bad) {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestCheckListen(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:80", "localhost:1", "LOCALHOST:1", "[::1]:8080", "127.0.0.2:9"} {
		if err := CheckListen(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:80", ":80", "10.0.0.1:80", "example.com:80", "127.0.0.1", "127.0.0.1:99999"} {
		if CheckListen(bad) == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
