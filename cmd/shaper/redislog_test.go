package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// go-redis logs every failed dial: a tour saw a line per submission while
// Redis was down, each with the key "msg" twice (invalid JSON for most
// readers). One line per redisLogEvery, the repeats counted, one "msg".
func TestRedisLogIsQuietAndValid(t *testing.T) {
	var buf bytes.Buffer
	r := &redisLog{log: slog.New(slog.NewJSONHandler(&buf, nil))}
	r.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %s", 5, "connection refused")
	t0 := time.Now()
	for i := range 4 {
		r.printf(t0.Add(time.Duration(i)*time.Second), "redis: connection pool: failed to dial after %d attempts: %s", 5, "connection refused")
	}
	r.printf(t0.Add(redisLogEvery+time.Millisecond), "redis: connection pool: failed to dial after %d attempts: %s", 5, "connection refused")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines for 6 messages within and past %v, want 2:\n%s", len(lines), redisLogEvery, buf.String())
	}
	for i, line := range lines {
		if strings.Count(line, `"msg":`) != 1 {
			t.Errorf("line %d has the key msg %d times: %s", i, strings.Count(line, `"msg":`), line)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, line)
		}
		if v["msg"] != "redis client" || !strings.Contains(v["detail"].(string), "failed to dial after 5 attempts") {
			t.Errorf("line %d = %s, want msg \"redis client\" and go-redis's message as detail", i, line)
		}
		if want := []any{nil, 4.0}[i]; v["left_out"] != want {
			t.Errorf("line %d: left_out = %v, want %v", i, v["left_out"], want)
		}
	}
}
