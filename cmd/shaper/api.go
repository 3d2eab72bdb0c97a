package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/urfave/cli/v2"

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
// requests give up after timeout.
func apiClient(c *cli.Context, timeout time.Duration) (*client.Client, error) {
	api, err := client.New("http://"+c.String("http"), client.Config{
		HTTPClient: &http.Client{Timeout: timeout},
		UserAgent:  "shaper-cli",
		Token:      c.String("admin-token"),
	})
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	return api, nil
}

// apiError words an error of the shaper's API for the operator: an answer
// as its status and the problem's detail, no answer with a hint at --http.
func apiError(err error) error {
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
