package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestUpstreamDialerTLS sends a request through a HostClient whose dials,
// handshake included, run on upstreamDialer's goroutine: fasthttp must take
// the conn as already TLS (not wrap it again), and the server name must be
// checked against the certificate.
func TestUpstreamDialerTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			t.Error("request arrived without TLS")
		}
		_, _ = w.Write([]byte("over tls"))
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	for _, tc := range []struct {
		name       string
		serverName string
		wantErr    bool
	}{
		// httptest's certificate is for example.com and 127.0.0.1.
		{"certificate matches", "example.com", false},
		{"certificate for another name", "other.invalid", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := upstreamDialer{tls: &tls.Config{ServerName: tc.serverName, RootCAs: roots}}
			c := &fasthttp.HostClient{Addr: u.Host, IsTLS: true, DialTimeout: d.dial}
			status, body, err := c.Get(nil, "https://"+u.Host+"/")
			if tc.wantErr {
				var certErr *tls.CertificateVerificationError
				if !errors.As(err, &certErr) {
					t.Fatalf("err = %v, want a certificate verification error", err)
				}
				return
			}
			if err != nil || status != 200 || string(body) != "over tls" {
				t.Fatalf("GET = %d %q %v", status, body, err)
			}
		})
	}
}

// TestUpstreamDialerErrors: a refused connection and a handshake that never
// completes come back as errors, the latter within the timeout.
func TestUpstreamDialerErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if conn, err := (upstreamDialer{}).dial(addr, time.Second); err == nil {
		conn.Close()
		t.Fatal("dial to a closed port succeeded")
	}

	// A listener that accepts and never answers the client hello.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := silent.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	d := upstreamDialer{tls: &tls.Config{ServerName: "example.com"}}
	conn, err := d.dial(silent.Addr().String(), 100*time.Millisecond)
	if err == nil {
		conn.Close()
		t.Fatal("handshake with a silent server succeeded")
	}
	if !errors.Is(err, fasthttp.ErrTLSHandshakeTimeout) {
		t.Fatalf("err = %v, want %v", err, fasthttp.ErrTLSHandshakeTimeout)
	}
	(<-accepted).Close()
}
