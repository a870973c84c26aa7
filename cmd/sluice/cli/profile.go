package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Profile is a saved endpoint and credential.
type Profile struct {
	Endpoint string `json:"endpoint"`
	APIKey   string `json:"api_key"`
	TenantID string `json:"tenant_id,omitempty"`
	// CAFile holds the certificates that servers' TLS certificates must
	// chain to (a private CA's); empty: the system's roots.
	CAFile string `json:"ca_file,omitempty"`
}

type configFile struct {
	Profiles map[string]Profile `json:"profiles"`
}

func readConfig(path string) (configFile, error) {
	var c configFile
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return configFile{Profiles: map[string]Profile{}}, nil
	}
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("parse config %s: %w", path, err)
	}
	if c.Profiles == nil {
		c.Profiles = map[string]Profile{}
	}
	return c, nil
}

// saveProfile writes the profile into the config file with mode 0600 (it
// holds a secret), replacing the file atomically.
func saveProfile(path, name string, p Profile) error {
	c, err := readConfig(path)
	if err != nil {
		return err
	}
	c.Profiles[name] = p
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create config dir: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write config: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// defaultEndpoint is where a local `sluice dev` listens.
const defaultEndpoint = "http://127.0.0.1:8080"

// resolve returns the endpoint and API key to use: flags (and their
// environment variables) over the selected profile. A profile that does not
// exist is an error, unless creating (signup, login), where the endpoint
// comes from --endpoint, else the default profile, else defaultEndpoint.
func (a *app) resolve(needKey, creating bool) (Profile, error) {
	c, err := readConfig(a.configPath)
	if err != nil {
		return Profile{}, err
	}
	p, ok := c.Profiles[a.profile]
	if !ok && !creating && a.profile != "default" {
		return p, usageError{fmt.Errorf("profile %q not found in %s; create it with `sluice --profile %s login` or `signup`", a.profile, a.configPath, a.profile)}
	}
	if !ok && creating {
		p.Endpoint = c.Profiles["default"].Endpoint
		p.CAFile = c.Profiles["default"].CAFile
	}
	if a.endpoint != "" && a.endpoint != p.Endpoint {
		// Another server: its CA, if any, is --ca-file's.
		p.Endpoint, p.CAFile = a.endpoint, ""
	}
	if a.apiKey != "" {
		p.APIKey = a.apiKey
	}
	if a.caFile != "" {
		// Absolute: a profile saved with it works from any folder.
		abs, err := filepath.Abs(a.caFile)
		if err != nil {
			return p, usageError{fmt.Errorf("--ca-file: %w", err)}
		}
		p.CAFile = abs
	}
	if p.Endpoint == "" {
		p.Endpoint = defaultEndpoint
	}
	if needKey && p.APIKey == "" {
		return p, usageError{fmt.Errorf("no API key: run `sluice login --api-key slk_…`, or pass --api-key / $SLUICE_API_KEY")}
	}
	return p, nil
}

// profileExists reports whether the config file has the named profile.
func (a *app) profileExists(name string) (bool, error) {
	c, err := readConfig(a.configPath)
	if err != nil {
		return false, err
	}
	_, ok := c.Profiles[name]
	return ok, nil
}
