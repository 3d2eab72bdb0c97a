#!/usr/bin/env bash
# The shaper's delivery beside the NATS floor, in one run (see integration/bench/floor/main.go):
# a standalone nats-server with a work-queue pull consumer, then the shaper unpaced and paced (its
# keys' slots together, then spread), each paced run beside a bare hand-off made the same way (one
# request per hand-off, nothing stored), each measured from outside its processes. Prints a
# Markdown table and the project's delivery targets (unpaced ≥ 0.6× the floor, paced ≤ 50 CPU-µs).
# Usage, from anywhere:  integration/bench/floor.sh [flags]   (-h lists them; defaults:
# -jobs 20000 -keys 1000 -payload 100 -paced-keys 100 -paced-rate 15 -paced-duration 20s
# -paced-warmup 2s; -no-await=false skips the floor with acks not awaited)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go run ./integration/bench/floor "$@"
