package main

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

func healthCommand() *cli.Command {
	return &cli.Command{
		Name:  "health",
		Usage: "exit 0 when the shaper at --http accepts jobs (GET /readyz), 1 otherwise",
		Description: `A health check for a container or a supervisor, with nothing else installed:
the image's HEALTHCHECK runs it. --http is the address the shaper serves on
(SHAPER_HTTP, as serve reads it): an address on every interface (0.0.0.0:8080,
[::]:8080, :8080) is asked on loopback. With --live it only asks whether the
process answers (GET /healthz), not whether it reaches JetStream.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "http", Value: shaper.DefaultHTTPAddr, Usage: "the shaper's HTTP address", EnvVars: envVar("http")},
			&cli.BoolFlag{Name: "live", Usage: "ask GET /healthz (the process is alive) instead of /readyz"},
			&cli.DurationFlag{Name: "timeout", Value: 2 * time.Second, Usage: "give up after this long"},
		},
		Action: func(c *cli.Context) error {
			addr := loopbackIfUnspecified(c.String("http"))
			if err := cmdline.HostPort(addr); err != nil {
				return cli.Exit("shaper health: "+badHTTP(c.String("http"), err).Error(), cmdline.ExitUsage)
			}
			if d := c.Duration("timeout"); d <= 0 {
				// An http.Client's zero timeout is none: a check that may hang.
				return cli.Exit(fmt.Sprintf("shaper health: --timeout %s: want a positive duration", d), cmdline.ExitUsage)
			}
			api, err := client.New("http://"+addr, client.Config{HTTPClient: &http.Client{Timeout: c.Duration("timeout")}, UserAgent: "shaper-health"})
			if err != nil {
				return fmt.Errorf("health: --http: %w", err)
			}
			if c.Bool("live") {
				if _, err := api.Health(c.Context); err != nil {
					return fmt.Errorf("health: %s: %w", addr, apiWording(err))
				}
				fmt.Fprintf(c.App.Writer, "%s: alive\n", addr)
				return nil
			}
			if err := api.Ready(c.Context); err != nil {
				return fmt.Errorf("health: %s: not ready: %w", addr, apiWording(err))
			}
			fmt.Fprintf(c.App.Writer, "%s: ready\n", addr)
			return nil
		},
	}
}

// loopbackIfUnspecified returns addr with an unspecified host (empty,
// 0.0.0.0, ::) replaced by the loopback address of its family: where a
// shaper listening on every interface is reached from its own machine.
func loopbackIfUnspecified(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch ip := net.ParseIP(host); {
	case host == "" || ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		return net.JoinHostPort("127.0.0.1", port)
	case ip != nil && ip.IsUnspecified():
		return net.JoinHostPort("::1", port)
	}
	return addr
}
