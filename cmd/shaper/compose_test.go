package main

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/shaper-dev/shaper/shaper"
)

// composeFile is the part of docker-compose.yml the test checks.
type composeFile struct {
	Services map[string]struct {
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
	} `yaml:"services"`
}

// docker-compose.yml runs shaper serve with flags and SHAPER_* variables
// that exist, an admin token wherever the HTTP API listens beyond loopback,
// a policy file of the repository, and one shaper where the CLI's default
// --http reaches it.
func TestComposeFileMatchesServe(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose composeFile
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	flags, envs := map[string]bool{}, map[string]bool{}
	for _, f := range serveCommand().Flags {
		for _, n := range f.Names() {
			flags["--"+n] = true
		}
		if e, ok := f.(interface{ GetEnvVars() []string }); ok {
			for _, v := range e.GetEnvVars() {
				envs[v] = true
			}
		}
	}
	_, defaultPort, _ := net.SplitHostPort(shaper.DefaultHTTPAddr) // the CLI's default --http
	shapers, reachable := 0, false
	for name, svc := range compose.Services {
		i := slices.Index(svc.Command, "./cmd/shaper")
		if i < 0 {
			continue
		}
		shapers++
		if len(svc.Command) <= i+1 || svc.Command[i+1] != "serve" {
			t.Errorf("%s runs %q, want shaper serve", name, svc.Command)
			continue
		}
		for _, arg := range svc.Command[i+2:] {
			if f, _, _ := strings.Cut(arg, "="); strings.HasPrefix(f, "-") && !flags[f] {
				t.Errorf("%s: shaper serve has no flag %s", name, f)
			}
		}
		for v := range svc.Environment {
			if strings.HasPrefix(v, "SHAPER_") && !envs[v] {
				t.Errorf("%s: shaper serve reads no %s", name, v)
			}
		}
		host, _, err := net.SplitHostPort(svc.Environment["SHAPER_HTTP"])
		if err != nil {
			t.Errorf("%s: SHAPER_HTTP %q: %v", name, svc.Environment["SHAPER_HTTP"], err)
		} else if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && svc.Environment["SHAPER_ADMIN_TOKEN"] == "" && svc.Environment["SHAPER_ADMIN_LOOPBACK_ONLY"] == "" {
			t.Errorf("%s listens on %s without SHAPER_ADMIN_TOKEN: shaper serve refuses to start", name, host)
		}
		if p := svc.Environment["SHAPER_POLICIES"]; p == "" {
			t.Errorf("%s: no SHAPER_POLICIES", name)
		} else if _, err := os.Stat(filepath.Join("../..", strings.TrimPrefix(p, "/src/"))); err != nil {
			t.Errorf("%s: SHAPER_POLICIES %s is not a file of the repository (mounted at /src): %v", name, p, err)
		}
		for _, p := range svc.Ports {
			if strings.HasPrefix(p, defaultPort+":") {
				reachable = true
			}
		}
	}
	if shapers < 2 {
		t.Errorf("docker-compose.yml runs %d shapers, want the two of the production-shaped topology", shapers)
	}
	if !reachable {
		t.Errorf("no shaper is published on port %s, where the CLI's default --http looks", defaultPort)
	}
}
