package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's certificates and keys, PEM-encoded, as written
// under DIR/pki.
type pki struct {
	dir                 string
	caCert              []byte
	adminCert, adminKey []byte
}

// keyPair is a certificate and its key, PEM-encoded.
type keyPair struct{ cert, key []byte }

// certAuthority signs the cluster's certificates. ECDSA P-256 throughout:
// RSA key generation costs seconds of a small machine's CPU.
type certAuthority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// makePKI writes the CA, the serving certificate of the API server, the
// client certificates of the admin (system:masters), the kubelet
// (system:node:NODE) and the API server's kubelet client, and the
// service-account signing key, under dir.
func makePKI(dir, node string, ips []net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, caPEM, err := newCA()
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: caPEM}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	}
	pairs := map[string]*x509.Certificate{
		"apiserver":      serving,
		"admin":          client("cove-kubetest-admin", "system:masters"),
		"kubelet":        client("system:node:"+node, "system:nodes"),
		"kubelet-client": client("kube-apiserver-kubelet-client", "system:masters"),
	}
	for name, tmpl := range pairs {
		kp, err := ca.sign(tmpl)
		if err != nil {
			return nil, fmt.Errorf("signing the %s certificate: %w", name, err)
		}
		if name == "admin" {
			p.adminCert, p.adminKey = kp.cert, kp.key
		}
		if err := writePair(dir, name, kp); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o644); err != nil {
		return nil, err
	}
	return p, writeServiceAccountKey(dir)
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func client(cn, group string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: []string{group}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

func newCA() (*certAuthority, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "cove-kubetest-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return &certAuthority{cert: cert, key: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func (ca *certAuthority) sign(tmpl *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return keyPair{}, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(30 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return keyPair{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func writePair(dir, name string, kp keyPair) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), kp.cert, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), kp.key, 0o600)
}

// writeServiceAccountKey writes the key the API server signs
// service-account tokens with (sa.key) and checks them with (sa.pub).
func writeServiceAccountKey(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

// kubeconfig is a kubeconfig file's text for server, trusting caPEM and
// authenticating with a client certificate.
func kubeconfig(server string, caPEM, certPEM, keyPEM []byte) string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kubetest
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: kubetest
current-context: kubetest
`, server, b64(caPEM), b64(certPEM), b64(keyPEM))
}
