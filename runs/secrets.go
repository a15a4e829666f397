package runs

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/store"
)

// Team secrets are model API keys a team gives the server for its runs.
// They are sealed with AES-256-GCM under the server's secret key (a file
// in the data directory, made on first start, readable by its owner
// only), with the team and name as additional data: a copy of the
// database alone reveals none, and a row moved to another team does not
// open. The API never returns a value.

var secretName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`) })

// loadSecretKey reads the sealing key, making it when there is none.
func loadSecretKey(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, "secret.key")
	key, err := os.ReadFile(path)
	if err == nil {
		if len(key) != 32 {
			return nil, fmt.Errorf("%s holds %d bytes, not a 32-byte key: restore it from a backup (the team secrets sealed with it cannot be opened without it), or remove it and set the secrets again", path, len(key))
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading the secret key: %w", err)
	}
	key = make([]byte, 32)
	rand.Read(key)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("making the secret key: %w", err)
	}
	// O_EXCL: a second server starting on the same directory at the same
	// time reads the first one's key instead of replacing it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return loadSecretKey(dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("making the secret key: %w", err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("making the secret key: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("making the secret key: %w", err)
	}
	return key, f.Close()
}

// Sealer returns the AEAD under the server's secret key. It seals team
// secrets, and the web UI's session cookies with it (server).
func (s *Service) Sealer() (cipher.AEAD, error) {
	s.secretOnce.Do(func() {
		key := s.cfg.SecretKey
		if key == nil {
			key, s.secretErr = loadSecretKey(s.cfg.DataDir)
			if s.secretErr != nil {
				return
			}
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			s.secretErr = fmt.Errorf("secret key: %w", err)
			return
		}
		s.sealer, s.secretErr = cipher.NewGCM(block)
	})
	return s.sealer, s.secretErr
}

func (s *Service) seal(team, name, value string) ([]byte, error) {
	a, err := s.Sealer()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, a.NonceSize())
	rand.Read(nonce)
	return a.Seal(nonce, nonce, []byte(value), []byte(team+"/"+name)), nil
}

// Secret returns team's secret name in clear: ErrNotFound if it has
// none. Never show it to the team: it is for the server's own calls.
func (s *Service) Secret(ctx context.Context, team, name string) (string, error) {
	sec, err := s.cfg.Store.GetSecret(ctx, team, name)
	if err != nil {
		return "", err
	}
	a, err := s.Sealer()
	if err != nil {
		return "", err
	}
	if len(sec.Value) < a.NonceSize() {
		return "", fmt.Errorf("secret %s of team %s is damaged; set it again", name, team)
	}
	plain, err := a.Open(nil, sec.Value[:a.NonceSize()], sec.Value[a.NonceSize():], []byte(team+"/"+name))
	if err != nil {
		return "", fmt.Errorf("secret %s of team %s does not open with this server's secret key (was secret.key replaced?); set it again", name, team)
	}
	return string(plain), nil
}

// PutSecret sets team's secret name to value, sealed: ErrInvalid for a
// bad name or an empty value.
func (s *Service) PutSecret(ctx context.Context, team, name, value string) (api.Secret, error) {
	if !secretName().MatchString(name) {
		return api.Secret{}, invalid("secret name %q: use letters, digits and _ (up to 64), not starting with a digit, like OPENAI_API_KEY", name)
	}
	if value == "" {
		return api.Secret{}, invalid("secret %s: value is empty; DELETE /v1/secrets/%s removes it", name, name)
	}
	sealed, err := s.seal(team, name, value)
	if err != nil {
		return api.Secret{}, err
	}
	sec := store.Secret{TeamID: team, Name: name, Value: sealed, UpdatedAt: s.cfg.Now()}
	if err := s.cfg.Store.PutSecret(ctx, sec); err != nil {
		return api.Secret{}, err
	}
	return api.Secret{Name: name, UpdatedAt: sec.UpdatedAt}, nil
}

// ListSecrets lists team's secrets by name, without their values.
func (s *Service) ListSecrets(ctx context.Context, team string) ([]api.Secret, error) {
	secs, err := s.cfg.Store.ListSecrets(ctx, team)
	if err != nil {
		return nil, err
	}
	out := []api.Secret{}
	for _, sec := range secs {
		out = append(out, api.Secret{Name: sec.Name, UpdatedAt: sec.UpdatedAt})
	}
	return out, nil
}

// DeleteSecret removes team's secret name: ErrNotFound if it has none.
func (s *Service) DeleteSecret(ctx context.Context, team, name string) error {
	return s.cfg.Store.DeleteSecret(ctx, team, name)
}
