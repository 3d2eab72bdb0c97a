package main

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"gopkg.in/yaml.v3"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper"
)

// composeFile is the part of docker-compose.yml the test checks.
type composeFile struct {
	Services map[string]struct {
		Build       any               `yaml:"build"` // "." or {context, dockerfile}
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		Configs     []struct{ Source, Target string }
	} `yaml:"services"`
	Configs map[string]struct{ File, Content string } `yaml:"configs"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose composeFile
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return compose
}

// buildsDockerfile reports whether a service's build is the repository's
// Dockerfile.
func buildsDockerfile(build any) bool {
	switch b := build.(type) {
	case string:
		return filepath.Clean(b) == "."
	case map[string]any:
		ctx, _ := b["context"].(string)
		file, _ := b["dockerfile"].(string)
		return filepath.Clean(ctx) == "." && (file == "" || file == "Dockerfile")
	}
	return false
}

// docker-compose.yml builds every shaper from the Dockerfile and runs shaper
// serve (the image's entry point) with flags and SHAPER_* variables that
// exist, an admin token wherever the HTTP API listens beyond loopback, a
// policy file of the repository, and one shaper where the CLI's default
// --http reaches it.
func TestComposeFileMatchesServe(t *testing.T) {
	compose := readCompose(t)
	envs := envVarsOf(serveCommand())
	// Where the image has a file of the repository: its COPYs, and the
	// services' bind mounts below.
	inImage := map[string]string{}
	for _, st := range readDockerfile(t, "../../Dockerfile") {
		for _, cp := range st.all("COPY") {
			if f := strings.Fields(cp.args); len(f) == 2 {
				inImage[f[1]] = f[0]
			}
		}
	}
	_, defaultPort, _ := net.SplitHostPort(shaper.DefaultHTTPAddr) // the CLI's default --http
	shapers, reachable := 0, false
	for name, svc := range compose.Services {
		shaperEnv := slices.ContainsFunc(slices.Collect(maps.Keys(svc.Environment)), func(k string) bool { return strings.HasPrefix(k, "SHAPER_") })
		if slices.Contains(svc.Command, "go") || strings.HasPrefix(svc.Image, "golang") {
			t.Errorf("%s runs the Go toolchain (%s %q): build the Dockerfile instead", name, svc.Image, svc.Command)
		}
		if svc.Build == nil {
			if shaperEnv {
				t.Errorf("%s has SHAPER_* variables but does not build the Dockerfile", name)
			}
			continue
		}
		if !buildsDockerfile(svc.Build) {
			t.Errorf("%s builds %v, want the repository's Dockerfile (build: .)", name, svc.Build)
		}
		shapers++
		if serve := checkArgs(t, name+"'s command", svc.Command); serve != nil && serve.Name != "serve" {
			t.Errorf("%s runs shaper %q, want shaper serve", name, svc.Command)
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
		files := maps.Clone(inImage)
		for _, v := range svc.Volumes {
			if src, target, ok := strings.Cut(v, ":"); ok && strings.HasPrefix(src, ".") {
				target, _, _ = strings.Cut(target, ":")
				files[target] = src
			}
		}
		if p := svc.Environment["SHAPER_POLICIES"]; p == "" {
			t.Errorf("%s: no SHAPER_POLICIES", name)
		} else if src, ok := files[p]; !ok {
			t.Errorf("%s: SHAPER_POLICIES %s is neither copied into the image nor mounted from the repository", name, p)
		} else if _, err := os.Stat(filepath.Join("../..", src)); err != nil {
			t.Errorf("%s: SHAPER_POLICIES %s comes from %s: %v", name, p, src, err)
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

// Prometheus scrapes every shaper and loads the alert rules of the
// repository, and Grafana gets the dashboard: the files compose mounts are
// the repository's.
func TestComposeMountsDashboardAndAlerts(t *testing.T) {
	compose := readCompose(t)
	mounted := map[string]string{} // a config's file → where a service sees it
	for name, c := range compose.Configs {
		if c.File == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join("../..", c.File)); err != nil {
			t.Errorf("config %s: %v", name, err)
		}
		for _, svc := range compose.Services {
			for _, sc := range svc.Configs {
				if sc.Source == name {
					mounted[filepath.Clean(c.File)] = sc.Target
				}
			}
		}
	}
	alerts, ok := mounted["deploy/prometheus/alerts.yml"]
	if !ok {
		t.Error("docker-compose.yml mounts no deploy/prometheus/alerts.yml")
	}
	if _, ok := mounted["deploy/grafana/shaper.json"]; !ok {
		t.Error("docker-compose.yml mounts no deploy/grafana/shaper.json")
	}
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(compose.Configs["prometheus"].Content), &prom); err != nil {
		t.Fatalf("the prometheus config: %v", err)
	}
	if !slices.Contains(prom.RuleFiles, alerts) {
		t.Errorf("prometheus rule_files %v, want the alert rules mounted at %s", prom.RuleFiles, alerts)
	}
	var targets []string
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	for name, svc := range compose.Services {
		if svc.Build == nil {
			continue
		}
		_, port, _ := net.SplitHostPort(svc.Environment["SHAPER_HTTP"])
		if !slices.Contains(targets, name+":"+port) {
			t.Errorf("prometheus scrapes %v, not %s:%s", targets, name, port)
		}
	}
}

// The NATS servers compose runs carry the largest job the shapers take
// (--max-payload, 1 MiB by default) with its headers: with the servers'
// default max_payload (1 MiB) the shapers would take only 960 KiB. The
// config is read by nats-server's own parser.
func TestComposeNATSCarriesTheLargestJob(t *testing.T) {
	compose := readCompose(t)
	conf, ok := compose.Configs["nats"]
	if !ok || conf.Content == "" {
		t.Fatal("docker-compose.yml has no nats config")
	}
	file := filepath.Join(t.TempDir(), "shaper.conf")
	if err := os.WriteFile(file, []byte(conf.Content), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("nats config: %v", err)
	}
	if want := int32(queue.DefaultMaxPayload + 64<<10); opts.MaxPayload < want {
		t.Errorf("nats config: max_payload %d, want at least %d (1 MiB and 64 KiB of headers)", opts.MaxPayload, want)
	}
	for _, name := range []string{"nats1", "nats2", "nats3"} {
		svc := compose.Services[name]
		mounted := false
		for _, c := range svc.Configs {
			mounted = mounted || c.Source == "nats" && c.Target == "/etc/nats/shaper.conf"
		}
		if !mounted || len(svc.Command) < 2 || svc.Command[0] != "-c" || svc.Command[1] != "/etc/nats/shaper.conf" {
			t.Errorf("%s: configs %v, command %v; want the nats config mounted at /etc/nats/shaper.conf and read with -c", name, svc.Configs, svc.Command)
		}
	}
}
