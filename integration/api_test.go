package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// apiClient reads the shaper's JSON API. Every request is bounded by a
// short timeout, so a test polling a stopped shaper does not hang.
var apiClient = &http.Client{Timeout: 3 * time.Second}

// getJSON GETs http://addr+path and decodes a 200 answer into out. It
// returns the status code; an error for a failed request, a non-200 answer
// or a body that does not decode.
func getJSON(addr, path string, out any) (int, error) {
	resp, err := apiClient.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return resp.StatusCode, fmt.Errorf("GET %s: %v in %q", path, err, body)
	}
	return resp.StatusCode, nil
}

// jobStatus is the part of GET /v1/jobs/{id} the tests read.
type jobStatus struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Deferrals int    `json:"deferrals"`
	Attempts  int    `json:"delivery_attempts"`
}

// jobState returns the status of job id at addr ("" with the error when
// there is no record yet or the request failed).
func jobState(addr, id string) (jobStatus, error) {
	var j jobStatus
	_, err := getJSON(addr, "/v1/jobs/"+id, &j)
	return j, err
}

// policyState is the part of a GET /v1/policies entry the tests read.
type policyState struct {
	Name        string `json:"name"`
	Queued      int64  `json:"queued"`
	Admitted    uint64 `json:"admitted"`
	Rejected    uint64 `json:"rejected"`
	Deferred    uint64 `json:"deferred"`
	DeferQueued int64  `json:"deferred_queued"`
	Readmitted  uint64 `json:"readmitted"`
	Dead        uint64 `json:"dead"`
	Delivered   uint64 `json:"delivered"`
	Draining    bool   `json:"draining"`
	LimiterErrs uint64 `json:"limiter_errors"`
}

// policyStates returns GET /v1/policies at addr by policy name.
func policyStates(addr string) (map[string]policyState, error) {
	var all struct {
		Policies []policyState `json:"policies"`
	}
	if _, err := getJSON(addr, "/v1/policies", &all); err != nil {
		return nil, err
	}
	m := make(map[string]policyState, len(all.Policies))
	for _, p := range all.Policies {
		m[p.Name] = p
	}
	return m, nil
}
