#!/usr/bin/env bash
# What this machine charges for a system call, a fresh page and a thread wake-up
# (docs/benchmarks.md, "The machine"). Needs a C compiler and python3 (make deps).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$(mktemp -d)/host-costs"
cc -O2 -o "$bin" "$here/host-costs.c"
"$bin"
python3 "$here/pingpong.py"
