package remote

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 (its own CA) and its key.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "towerrl test learner"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func TestTLS(t *testing.T) {
	cert, key := selfSigned(t, t.TempDir())
	s := serve(t, ServeConfig{TLSCert: cert, TLSKey: key})
	if !strings.HasPrefix(s.URL(), "tls://") {
		t.Fatalf("URL %s, want tls://", s.URL())
	}
	ctx := timeout(t, 20*time.Second)
	if _, err := Dial(ctx, s.URL(), ClientConfig{Creds: credsFor(t, s, "w")}); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("Dial without the CA: %v, want an error about the certificate's CA", err)
	}
	c := dial(t, s, ClientConfig{CAFile: cert, BatcherID: "tls"})
	ch, err := s.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishRollout(ctx, rolloutFor(0, 3)); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, ctx, ch, 1, true)[0]; d.Rollout.BatcherID != "tls" {
		t.Errorf("rollout from %q", d.Rollout.BatcherID)
	}
	// A plain-text client is refused.
	if _, err := Dial(ctx, strings.Replace(s.URL(), "tls://", "nats://", 1), ClientConfig{Creds: credsFor(t, s, "w")}); err == nil {
		t.Error("a plain-text client connected to a TLS server")
	} else if errors.Is(err, ErrUnauthorized) {
		t.Logf("plain text: %v", err)
	}
}
