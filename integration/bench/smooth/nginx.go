package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// nginxConf is nginx's configuration: one process in the foreground (no
// worker left behind if it is killed), every file in the row's directory,
// limit_req keyed by the URI at the shape's rate with a burst that never
// refuses (so every request is delayed to its turn: delay mode), in front
// of the consumer over kept-alive connections.
const nginxConf = `daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 65536;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 32768; }
http {
  access_log off;
  client_body_temp_path %[1]s/tmp;
  proxy_temp_path %[1]s/tmp;
  fastcgi_temp_path %[1]s/tmp;
  uwsgi_temp_path %[1]s/tmp;
  scgi_temp_path %[1]s/tmp;
  limit_req_zone $uri zone=keys:32m rate=%[2]dr/s;
  upstream consumer { server 127.0.0.1:%[3]d; keepalive 1024; }
  server {
    listen 127.0.0.1:%[4]d backlog=8192;
    location / {
      limit_req zone=keys burst=1000000;
      proxy_pass http://consumer;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`

// nginxRow measures nginx at shape sh.
func (b *bench) nginxRow(ctx context.Context, sh shape, round int) (row, error) {
	name := fmt.Sprintf("nginx-%dx%d-%d", sh.keys, sh.rate, round)
	dir := filepath.Join(b.env.Dir, name)
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return row{}, err
	}
	up, err1 := benchkit.FreePort()
	front, err2 := benchkit.FreePort()
	if err1 != nil || err2 != nil {
		return row{}, fmt.Errorf("free ports: %v %v", err1, err2)
	}
	c, out, err := b.startConsumer(ctx, name+"-consumer", roleHTTP, "-listen", fmt.Sprintf("127.0.0.1:%d", up))
	if err != nil {
		return row{}, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, sh.rate, up, front), 0o644); err != nil {
		return row{}, err
	}
	n, err := b.env.Group.Start(name, b.nginxBin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	if err != nil {
		return row{}, err
	}
	defer n.Stop(10 * time.Second)
	addr := fmt.Sprintf("127.0.0.1:%d", front)
	if err := awaitListen(ctx, n, addr); err != nil {
		return row{}, err
	}
	start := time.Now()
	over := b.phases(sh)
	from := start.Add(over + b.cfg.skip)
	to := from.Add(b.cfg.duration)
	loadCtx, stop := context.WithDeadline(ctx, to.Add(100*time.Millisecond))
	defer stop()
	cpu0, cpu1 := make(chan float64, 1), make(chan float64, 1)
	go func() {
		sleepUntil(ctx, from)
		v, _ := benchkit.CPUSeconds(n.Pid())
		cpu0 <- v
		sleepUntil(ctx, to)
		v, _ = benchkit.CPUSeconds(n.Pid())
		cpu1 <- v
	}()
	load(loadCtx, addr, sh.keys, b.cfg.inflight, start, over)
	if ctx.Err() != nil {
		return row{}, ctx.Err()
	}
	arr, err := collect(ctx, c, out)
	if err != nil {
		return row{}, err
	}
	r := measure("nginx", sh, round, arr, from.UnixNano(), to.UnixNano(), b.cfg.window)
	r.cpuSecs = <-cpu1 - <-cpu0
	return r, nil
}

// load keeps inflight requests outstanding on each of keys keys (GET
// /<key>) against addr until ctx ends, key i's from start plus i/keys of
// over on.
func load(ctx context.Context, addr string, keys, inflight int, start time.Time, over time.Duration) {
	tr := &http.Transport{MaxIdleConnsPerHost: keys * inflight, MaxIdleConns: keys * inflight, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for k := range keys {
		url := fmt.Sprintf("http://%s/k%d", addr, k)
		for range inflight {
			wg.Go(func() {
				sleepUntil(ctx, start.Add(time.Duration(k)*over/time.Duration(keys)))
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					resp, err := cl.Do(req)
					if err != nil {
						if ctx.Err() == nil {
							time.Sleep(10 * time.Millisecond)
						}
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
}

// awaitListen waits until something accepts connections on addr, failing
// if p exits first or nothing does within 10 s.
func awaitListen(ctx context.Context, p *benchkit.Proc, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited; its log:\n%s", p.Name, p.Tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not listen on %s within 10 s; its log:\n%s", p.Name, addr, p.Tail())
		}
	}
}
