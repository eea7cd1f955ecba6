#!/usr/bin/env bash
# Regenerates the web console's screenshots in docs/console/ (README "Console"): runs the browser
# test (tests/cluster/console.rs), which saves a PNG of each page it checks when
# STEWARD_CONSOLE_SCREENSHOTS names a directory. Needs chromium and chromium-driver (Debian).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/docs/console
mkdir -p "$out"
STEWARD_CONSOLE_SCREENSHOTS=$out cargo test -p steward --test cluster -- --exact \
    console::a_browser_on_a_follower_sees_writes_locks_operations_pools_and_nodes_live
ls -l "$out"/*.png
