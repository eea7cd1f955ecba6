#!/usr/bin/env bash
# Open web consoles against write throughput (issue 28, README "Console"): a 3-node release
# cluster (`steward dev`, on a fresh data dir for every run) under steward-bench's creates, with
# no console open, and with --consoles live pages open on one follower (server-sent-event
# streams read the way a browser reads them, spread over the pages that change under creates:
# the objects being written, the cluster, locks, operations, pools). Runs alternate (none,
# consoles, none, consoles, ...; the order flips every repetition) and the script prints each
# run and the medians: throughput, and the servers' CPU per create.
#
#   bench/console-load.sh [--reps 3] [--consoles 20] [--clients 64] [--duration 10s]
#                         [--out DIR (default: target/console-load-<time>)]
#
# Needs curl. Ports 9401-9403 (client), 9501.. (peer), 9601.. (metrics), 9701.. (console).
set -euo pipefail
cd "$(dirname "$0")/.."

reps=3
consoles=20
clients=64
duration=10s
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) reps=$2; shift 2 ;;
        --consoles) consoles=$2; shift 2 ;;
        --clients) clients=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 1 ;;
    esac
done
command -v curl >/dev/null || { echo "error: needs curl" >&2; exit 1; }
[ -n "$out" ] || out=target/console-load-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
echo "== cargo build --release (steward, steward-bench)"
cargo build -q --release -p steward -p steward-bench
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -E 's/.*"target_directory":"([^"]*)".*/\1/')
steward=$target_dir/release/steward
bench=$target_dir/release/steward-bench
base=9400
endpoints=127.0.0.1:9401,127.0.0.1:9402,127.0.0.1:9403

dev_pid=""
streams=()
cleanup() {
    for p in "${streams[@]}"; do kill "$p" 2>/dev/null || true; done
    streams=()
    if [ -n "$dev_pid" ]; then
        kill -INT "$dev_pid" 2>/dev/null || true
        wait "$dev_pid" 2>/dev/null || true
        dev_pid=""
    fi
}
trap cleanup EXIT INT TERM

# run MODE REP: one measured run on a fresh cluster; MODE is none or consoles.
run() {
    local mode=$1 rep=$2 data
    data=$(mktemp -d)
    "$steward" dev --base-port "$base" --data-dir "$data" > "$out/dev-$mode-$rep.log" 2>&1 &
    dev_pid=$!
    for _ in $(seq 1 150); do
        grep -q 'node(s) running' "$out/dev-$mode-$rep.log" && break
        sleep 0.2
    done
    grep -q 'node(s) running' "$out/dev-$mode-$rep.log" \
        || { echo "error: the cluster did not start (see $out/dev-$mode-$rep.log)" >&2; exit 1; }
    local leader=""
    for _ in $(seq 1 100); do
        leader=$(STEWARD_ENDPOINTS=$endpoints "$steward" cluster status -o json 2>/dev/null \
            | python3 -c 'import json,sys; print(json.load(sys.stdin).get("leaderId", ""))' 2>/dev/null || true)
        [ -n "$leader" ] && [ "$leader" != "0" ] && break
        sleep 0.2
    done
    [ -n "$leader" ] && [ "$leader" != "0" ] || { echo "error: no leader (see $out/dev-$mode-$rep.log)" >&2; exit 1; }
    local follower=$(( leader % 3 + 1 ))
    local pids
    pids=$(grep -o 'pid [0-9]*' "$out/dev-$mode-$rep.log" | awk '{print $2}' | paste -sd, -)
    if [ "$mode" = consoles ]; then
        local views=("/resources/Bench?namespace=default" /cluster /locks /operations /pools)
        for i in $(seq 1 "$consoles"); do
            local view=${views[$(( (i - 1) % ${#views[@]} ))]}
            curl -sN --get --data-urlencode "view=$view" \
                "http://127.0.0.1:$(( base + 300 + follower ))/events" > /dev/null &
            streams+=($!)
        done
    fi
    "$bench" create --endpoints "$endpoints" --clients "$clients" --warmup 2s \
        --duration "$duration" --server-pids "$pids" -o json > "$out/$mode-$rep.json"
    if [ "$mode" = consoles ]; then
        curl -s "http://127.0.0.1:$(( base + 200 + follower ))/metrics" \
            | grep -E '^steward_console_(streams|renders_total) ' > "$out/$mode-$rep.console.txt" || true
    fi
    python3 - "$out/$mode-$rep.json" "$mode" "$rep" "$follower" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
cpu = r.get("servers", {}).get("cpu_s", 0) / max(r["ops"], 1) * 1e6
print(f"{sys.argv[2]:>9} rep {sys.argv[3]}: {r['ops_per_s']:9.0f} creates/s  p99 {r['latency_ms']['p99']:7.2f} ms  "
      f"{cpu:6.0f} us CPU/create  (consoles on follower {sys.argv[4]})")
EOF
    cleanup
    rm -rf "$data"
}

for rep in $(seq 1 "$reps"); do
    if [ $(( rep % 2 )) -eq 1 ]; then order="none consoles"; else order="consoles none"; fi
    for mode in $order; do run "$mode" "$rep"; done
done

python3 - "$out" "$reps" "$consoles" <<'EOF'
import json, statistics, sys
out, reps, consoles = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def figures(mode):
    runs = [json.load(open(f"{out}/{mode}-{rep}.json")) for rep in range(1, reps + 1)]
    ops = statistics.median(r["ops_per_s"] for r in runs)
    cpu = statistics.median(r["servers"]["cpu_s"] / max(r["ops"], 1) * 1e6 for r in runs)
    return ops, cpu
none, with_ = figures("none"), figures("consoles")
change = (with_[0] / none[0] - 1) * 100
print(f"median creates/s: {none[0]:.0f} without consoles, {with_[0]:.0f} with {consoles} open "
      f"({change:+.1f}%); CPU/create {none[1]:.0f} vs {with_[1]:.0f} us")
EOF
