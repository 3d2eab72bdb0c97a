// Package integration holds shaper's end-to-end tests. They build the shaper
// and nats-server binaries once per run (TestMain), start them as real
// processes on 127.0.0.1 with free ports and temporary directories, and kill
// whatever they started when a test ends, also when it fails.
//
// The tests cover the guarantees in docs/architecture.md that only real processes can
// show: a job answered 202 survives kill -9 of the shaper (TestKill9Restart)
// and the loss of a node of a 3-node JetStream cluster (TestClusterNodeLoss),
// per-key queue limits hold across that failover, a graceful shutdown
// delivers nothing twice, also with an idle client connection open
// (TestGracefulShutdown, TestGracefulShutdownIdleConn), a deferred job
// survives kill -9 and is delivered after the restart
// (TestDeferredSurvivesKill9), and two shapers on a 3-node cluster with
// Redis keep per-key queue sizes, rates and admission limits global, hand
// the drain over when the draining one is killed, and keep admitting when
// Redis is lost (TestTwoShapersOnCluster). Three shapers started at once
// on an empty cluster all become ready (TestShapersStartTogether, 10 runs);
// a lone shaper drains on through the election of its queue's stream and
// lease bucket (TestElectionUnderLoneShaper); kill -9 of the draining
// shaper hands the drain over within the lease's lifetime, redelivering at
// most one job per key (TestKill9DrainingShaper); memory does not grow with
// the jobs delivered under sustained load (TestSoak, also the benchmark of
// BENCHMARKS.md). TestTuneFidelity checks that shaper tune's replay
// predicts a live shaper: accepted and rejected counts within 2 % and the
// p99 time in queue within 10 % of a live run of the same trace (producer
// send --trace), for three made-up traces. TestUpgradeKeepsQueuedJobs
// starts this tree's shaper on a store written by the previous release
// (testdata/upgrade) and checks that its queued, deferred and dead jobs
// and its live override survive, in one partition and in four.
//
// Run them with
//
//	go test ./integration -count=1 -v
//
// and skip them with -short. -shaper.bin runs another shaper binary (a
// baseline) instead of one built from this tree; TestSoak's flags are in
// its doc.
package integration
