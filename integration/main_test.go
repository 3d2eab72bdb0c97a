package integration

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// bins are the binaries built once per run by TestMain.
var bins struct {
	shaper     string
	natsServer string
	producer   string
}

// shaperBin, when set, is the shaper binary the tests run instead of one
// built from this tree: a baseline to measure against.
var shaperBin = flag.String("shaper.bin", "", "run this shaper binary instead of building ./cmd/shaper")

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // every test skips itself
	}
	dir, err := os.MkdirTemp("", "shaper-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins.shaper = filepath.Join(dir, "shaper")
	bins.natsServer = filepath.Join(dir, "nats-server")
	bins.producer = filepath.Join(dir, "producer")
	builds := []struct{ out, pkg string }{
		{bins.natsServer, "github.com/nats-io/nats-server/v2"},
		{bins.producer, "github.com/shaper-dev/shaper/cmd/producer"},
	}
	if *shaperBin != "" {
		if bins.shaper, err = filepath.Abs(*shaperBin); err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 1
		}
	} else {
		builds = append(builds, struct{ out, pkg string }{bins.shaper, "github.com/shaper-dev/shaper/cmd/shaper"})
	}
	for _, b := range builds {
		if err := goBuild(b.out, b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, "integration:", err)
			return 1
		}
	}
	code := m.Run()
	reportFailures(os.Stdout)
	return code
}

// goBuild builds pkg into out with the go command that runs the tests.
func goBuild(out, pkg string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, buf.Bytes())
	}
	return nil
}

// goTool is $GOROOT/bin/go when GOROOT is set (go test sets it), else the go
// on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// needBinaries skips t in -short mode, where TestMain builds nothing, and
// otherwise has t named at the end of the run if it fails (noteFailure).
func needBinaries(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration tests start real processes; skipped in -short mode")
	}
	noteFailure(t)
}
