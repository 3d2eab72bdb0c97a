package integration

import (
	"context"
	"net/http"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
)

// apiHTTP bounds every request the tests make to read the shaper's API by
// a short timeout, so a test polling a stopped shaper does not hang.
var apiHTTP = &http.Client{Timeout: 3 * time.Second}

// api returns a client of the shaper whose HTTP API is at addr.
func api(addr string) (*client.Client, error) {
	return client.New("http://"+addr, client.Config{HTTPClient: apiHTTP})
}

// jobState returns what the shaper at addr knows of job id (an error when
// there is no record yet or the request failed).
func jobState(addr, id string) (client.Job, error) {
	c, err := api(addr)
	if err != nil {
		return client.Job{}, err
	}
	return c.Job(context.Background(), id)
}

// policyStates returns GET /v1/policies at addr by policy name.
func policyStates(addr string) (map[string]client.Policy, error) {
	c, err := api(addr)
	if err != nil {
		return nil, err
	}
	all, err := c.Policies(context.Background())
	if err != nil {
		return nil, err
	}
	m := make(map[string]client.Policy, len(all))
	for _, p := range all {
		m[p.Name] = p
	}
	return m, nil
}
