// Command tlsserve serves net/http/pprof over HTTPS with a throw-away PKI, to
// test a collector's TLS options against a real Go process.
//
// At start it makes a CA, a server certificate for 127.0.0.1 and a client
// certificate, both signed by the CA, and writes ca.pem, client.pem and
// client-key.pem (PKCS #8) into -certs DIR. Only then does it print
// "listening on 127.0.0.1:PORT" as its first stdout line. With
// -require-client-cert the handshake needs a client certificate signed by the
// CA; with -token T every request needs "Authorization: Bearer T" (401
// otherwise). A steady trickle of allocations in main.retainRecord keeps the
// heap profile non-trivial.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/* on http.DefaultServeMux
	"os"
	"path/filepath"
	"runtime"
	"time"
)

var (
	listen            = flag.String("listen", "127.0.0.1:0", "address of the HTTPS pprof server (port 0 picks a free one)")
	certs             = flag.String("certs", "", "directory to write ca.pem, client.pem and client-key.pem into (required)")
	requireClientCert = flag.Bool("require-client-cert", false, "require a client certificate signed by the CA")
	token             = flag.String("token", "", "if set, require the header \"Authorization: Bearer TOKEN\"")
	memProfileRate    = flag.Int("memprofilerate", 4096, "runtime.MemProfileRate, so that the small allocations show")
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "tlsserve: "+format+"\n", args...)
	os.Exit(1)
}

// issued is a certificate with its key.
type issued struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

var serial int64

// issue makes a certificate from tmpl, signed by parent (self-signed when
// parent is nil).
func issue(tmpl *x509.Certificate, parent *issued) issued {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		fail("generate key: %v", err)
	}
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		fail("create certificate %q: %v", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		fail("parse certificate: %v", err)
	}
	return issued{cert: cert, der: der, key: key}
}

func writePEM(name, blockType string, der []byte) {
	path := filepath.Join(*certs, name)
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		fail("%v", err)
	}
}

// records is what main.retainRecord keeps: a bounded ring, so the heap stays
// small but always shows the site.
var records = make([][]byte, 256)

//go:noinline
func retainRecord(i int) {
	b := make([]byte, 4<<10)
	b[0] = byte(i)
	records[i%len(records)] = b
}

func main() {
	flag.Parse()
	if *certs == "" {
		fail("-certs DIR is required")
	}
	runtime.MemProfileRate = *memProfileRate

	ca := issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "heapwatch test CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil)
	server := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, &ca)
	client := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "heapwatch test client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, &ca)

	clientKey, err := x509.MarshalPKCS8PrivateKey(client.key)
	if err != nil {
		fail("marshal client key: %v", err)
	}
	writePEM("ca.pem", "CERTIFICATE", ca.der)
	writePEM("client.pem", "CERTIFICATE", client.der)
	writePEM("client-key.pem", "PRIVATE KEY", clientKey)

	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	config := &tls.Config{
		Certificates: []tls.Certificate{{
			Certificate: [][]byte{server.der, ca.der},
			PrivateKey:  server.key,
			Leaf:        server.cert,
		}},
		MinVersion: tls.VersionTLS12,
	}
	if *requireClientCert {
		config.ClientAuth = tls.RequireAndVerifyClientCert
		config.ClientCAs = pool
	}

	var handler http.Handler = http.DefaultServeMux
	if *token != "" {
		want := []byte("Bearer " + *token)
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := []byte(r.Header.Get("Authorization"))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
				return
			}
			http.DefaultServeMux.ServeHTTP(w, r)
		})
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fail("listen %s: %v", *listen, err)
	}
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         config,
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	go func() {
		err := srv.Serve(tls.NewListener(ln, config))
		fail("https server stopped: %v", err)
	}()

	for i := 0; ; i++ {
		retainRecord(i)
		time.Sleep(time.Millisecond)
	}
}
