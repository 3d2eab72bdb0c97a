package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// apiFlags are the flags of every command that talks to a running shaper:
// its address and the admin token its admin routes require.
func apiFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "http", Value: shaper.DefaultHTTPAddr, Usage: "the shaper's HTTP address", EnvVars: envVar("http")},
		&cli.StringFlag{Name: "admin-token", Usage: "bearer token of the shaper's admin routes (needed unless it runs on this machine without one)", EnvVars: envVar("admin-token")},
	}
}

// apiClient returns a client of the running shaper at --http, whose
// requests give up after timeout. An address no URL can hold is a bad
// command line.
func apiClient(c *cli.Context, timeout time.Duration) (*client.Client, error) {
	if err := cmdline.HostPort(c.String("http")); err != nil {
		return nil, cli.Exit("shaper "+commandName(c)+": "+badHTTP(c.String("http"), err).Error(), cmdline.ExitUsage)
	}
	api, err := client.New("http://"+c.String("http"), client.Config{
		HTTPClient: &http.Client{Timeout: timeout},
		UserAgent:  "shaper-cli",
		Token:      c.String("admin-token"),
	})
	if err != nil {
		var bad *url.Error
		if errors.As(err, &bad) {
			err = bad.Err
		}
		return nil, cli.Exit("shaper "+commandName(c)+": "+badHTTP(c.String("http"), err).Error(), cmdline.ExitUsage)
	}
	return api, nil
}

// badHTTP is the error of an --http value that is not HOST:PORT, saying
// why (the error of hostPort, or of the URL made of it).
func badHTTP(value string, why error) error {
	return fmt.Errorf("--http %q: want HOST:PORT, such as %s (%v)", value, shaper.DefaultHTTPAddr, why)
}

// commandName is the command c runs, as an operator types it after
// "shaper": "dead replay", "status".
func commandName(c *cli.Context) string {
	if name, ok := strings.CutPrefix(c.Command.HelpName, c.App.Name+" "); ok {
		return name
	}
	return c.Command.Name
}

// apiError is the error of command (as "dead list") failing with err, an
// error of the shaper's API. A refusal that running again will not change
// (400: a value the shaper refuses; 404: a policy, job or dead letter it
// does not have) is a bad command line, exit 2, like the values a command
// checks itself; any other answer is said with its status and the
// problem's detail, and no answer with a hint at --http (exit 1).
func apiError(err error, command string) error {
	var refused *client.Error
	if errors.As(err, &refused) && (refused.StatusCode == http.StatusBadRequest || refused.StatusCode == http.StatusNotFound) {
		return cli.Exit("shaper "+command+": "+refused.Problem.Detail, cmdline.ExitUsage)
	}
	return fmt.Errorf("shaper %s: %w", command, apiWording(err))
}

// apiWording words an error of the shaper's API for the operator: an
// answer as its status and the problem's detail, no answer with a hint at
// --http.
func apiWording(err error) error {
	var answer *client.Error
	if errors.As(err, &answer) {
		if errors.Is(err, client.ErrUnauthorized) {
			return fmt.Errorf("%d %s: %s (give the shaper's admin token with --admin-token or SHAPER_ADMIN_TOKEN)",
				answer.StatusCode, http.StatusText(answer.StatusCode), answer.Problem.Detail)
		}
		return fmt.Errorf("%d %s: %s", answer.StatusCode, http.StatusText(answer.StatusCode), answer.Problem.Detail)
	}
	var transport *url.Error
	if errors.As(err, &transport) {
		return fmt.Errorf("%w (is the shaper running? see --http)", transport)
	}
	return err
}
