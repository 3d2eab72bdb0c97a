#!/usr/bin/env bash
# The shaper's delivery beside the NATS floor, in one run (see integration/bench/floor/main.go):
# a standalone nats-server with a work-queue pull consumer, then the shaper unpaced and paced,
# each measured from outside its processes. Prints a Markdown table and the issue's targets.
# Usage, from anywhere:  integration/bench/floor.sh [flags]   (-h lists them; defaults:
# -jobs 20000 -keys 1000 -payload 100 -paced-keys 100 -paced-rate 15 -paced-duration 20s)
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go run ./integration/bench/floor "$@"
