// Package ui is the shaper's operator page: the page itself, embedded in
// the binary (plain HTML, CSS and JavaScript modules under assets/, no
// build step, nothing loaded from elsewhere), and Series, the figures it
// charts.
//
// Series samples every policy's counters and gauges from the policy table
// (Source) every second, in memory, and keeps the last five minutes of
// samples in a ring per policy: the rates of admitted, rejected, deferred,
// delivered and failed jobs, the queue depths, and the time in queue (p50,
// p99) and drain lateness (p99) of the drain events of each second, which
// the drainer reports to the policy's Recorder. The deepest keys come from
// the drainers' memory, which keeps its keys by depth, so that no figure
// costs anything per key; they are read every few seconds while the page
// is open. Memory is bounded by the number of policies.
//
// The page polls GET /v1/ui/series (the samples since the last it has) and
// GET /v1/policies every second, and uses the existing admin routes for
// its actions: PUT /v1/policies/{name} and DELETE
// /v1/policies/{name}/override to tune, GET /v1/dead and POST
// /v1/dead/replay for dead letters. It sends the admin token, which it
// asks for and keeps in the browser tab (sessionStorage), as a bearer
// token; GET /v1/ui/access tells it whether one is needed, so that it asks
// before making a request that would be refused.
package ui
