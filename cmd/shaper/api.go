package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/shaper/client"
)

// apiClient returns a client of the running shaper at --http, whose
// requests give up after timeout.
func apiClient(c *cli.Context, timeout time.Duration) (*client.Client, error) {
	api, err := client.New("http://"+c.String("http"), client.Config{
		HTTPClient: &http.Client{Timeout: timeout},
		UserAgent:  "shaper-cli",
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
		return fmt.Errorf("%d %s: %s", answer.StatusCode, http.StatusText(answer.StatusCode), answer.Problem.Detail)
	}
	var transport *url.Error
	if errors.As(err, &transport) {
		return fmt.Errorf("%w (is the shaper running? see --http)", transport)
	}
	return err
}
