package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerIgnored reports whether .dockerignore leaves path (relative to the
// repository's root, with slashes) out of the build context: a pattern
// matches it or one of its parent directories (filepath.Match, with a
// leading **/ matching any depth).
func dockerIgnored(t *testing.T, path string) bool {
	t.Helper()
	raw, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(filepath.ToSlash(filepath.Clean(path)), "/")
	for _, line := range strings.Split(string(raw), "\n") {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if strings.HasPrefix(p, "!") {
			t.Fatalf(".dockerignore: %s: exceptions are beyond this test's reading", p)
		}
		p = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(p)), "/")
		anyDepth := strings.HasPrefix(p, "**/")
		p = strings.TrimPrefix(p, "**/")
		for end := 1; end <= len(parts); end++ {
			for begin := 0; begin < end && (begin == 0 || anyDepth); begin++ {
				if ok, err := filepath.Match(p, strings.Join(parts[begin:end], "/")); err != nil {
					t.Fatalf(".dockerignore: %s: %v", line, err)
				} else if ok {
					return true
				}
			}
		}
	}
	return false
}

var embedDirective = regexp.MustCompile(`(?m)^//go:embed (.+)$`)

// The build context keeps what go build needs — go.mod, go.sum, every Go
// file that is not a test and every file a //go:embed names — and leaves
// out the repository's history.
func TestDockerignoreKeepsTheBuild(t *testing.T) {
	if !dockerIgnored(t, ".git/HEAD") {
		t.Error(".dockerignore keeps .git in the build context")
	}
	needed := []string{"go.mod", "go.sum"}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", path)
		if d.IsDir() && (rel == ".git" || d.Name() == "shaper-data") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		needed = append(needed, rel)
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range embedDirective.FindAllStringSubmatch(string(src), -1) {
			for _, pattern := range strings.Fields(m[1]) {
				matches, _ := filepath.Glob(filepath.Join(filepath.Dir(path), pattern))
				for _, match := range matches {
					filepath.WalkDir(match, func(p string, d fs.DirEntry, err error) error {
						if err == nil && !d.IsDir() {
							r, _ := filepath.Rel("../..", p)
							needed = append(needed, r)
						}
						return nil
					})
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(needed) < 50 {
		t.Fatalf("found %d files the build needs, want the repository's", len(needed))
	}
	for _, p := range needed {
		if dockerIgnored(t, p) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", p)
		}
	}
}
