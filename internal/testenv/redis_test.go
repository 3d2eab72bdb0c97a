package testenv

import "testing"

func TestRedisStopStart(t *testing.T) {
	s := StartRedis(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping(%s) = %v, want nil", s.Addr(), err)
	}
	s.Stop()
	s.Stop() // idempotent
	if err := ping(s.Addr()); err == nil {
		t.Fatalf("ping(%s) after Stop = nil, want an error", s.Addr())
	}
	s.Start()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("ping(%s) after Start = %v, want nil", s.Addr(), err)
	}
}

func TestRedisAddr(t *testing.T) {
	addr := Redis(t)
	if err := ping(addr); err != nil {
		t.Fatalf("ping(%s) = %v, want nil", addr, err)
	}
}
