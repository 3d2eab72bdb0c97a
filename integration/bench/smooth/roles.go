package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// The consumers: this program re-executed with the role's name first.
const (
	roleNATS = "nats-consumer" // answers the shaper's deliveries
	roleHTTP = "http-consumer" // nginx's upstream
)

// arrivals notes when each key's deliveries came, and writes them out.
type arrivals struct {
	mu   sync.Mutex
	keys []string
	at   []int64 // Unix nanoseconds
}

func (a *arrivals) note(key string) {
	now := time.Now().UnixNano()
	a.mu.Lock()
	a.keys = append(a.keys, key)
	a.at = append(a.at, now)
	a.mu.Unlock()
}

// write writes one "key nanoseconds" line per arrival into path.
func (a *arrivals) write(path string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriter(f)
	for i, k := range a.keys {
		fmt.Fprintf(w, "%s %d\n", k, a.at[i])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	return len(a.keys), f.Close()
}

// runRole runs the consumer role named by args[0], if any, and reports
// whether it did. A role says "ready" on stdout once it listens, and, once
// its stdin closes, writes its arrivals into -out and says "written N".
func runRole(args []string) (bool, error) {
	if len(args) == 0 || (args[0] != roleNATS && args[0] != roleHTTP) {
		return false, nil
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	url := fs.String("nats-url", "", "NATS server URL (nats-consumer)")
	subject := fs.String("subject", "", "the subjects to answer, ending in .> (nats-consumer)")
	listen := fs.String("listen", "", "host:port to serve on (http-consumer)")
	out := fs.String("out", "", "file to write the arrivals into")
	if err := fs.Parse(args[1:]); err != nil {
		return true, err
	}
	var a arrivals
	if args[0] == roleNATS {
		prefix := strings.TrimSuffix(*subject, ">")
		nc, err := nats.Connect(*url, nats.Name("smooth-consumer"))
		if err != nil {
			return true, err
		}
		defer nc.Close()
		sub, err := nc.Subscribe(*subject, func(m *nats.Msg) {
			a.note(strings.TrimPrefix(m.Subject, prefix))
			m.Respond(nil)
		})
		if err != nil {
			return true, err
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			return true, err
		}
		if err := nc.Flush(); err != nil {
			return true, err
		}
	} else {
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			return true, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.note(r.URL.Path)
			w.WriteHeader(http.StatusOK)
		})}
		go srv.Serve(l)
		defer srv.Close()
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
	}
	n, err := a.write(*out)
	if err != nil {
		return true, err
	}
	fmt.Println("written", n)
	return true, nil
}
