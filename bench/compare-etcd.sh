#!/usr/bin/env bash
# steward and etcd side by side on this machine (issue 5): a 3-node etcd and a 3-node steward on
# 127.0.0.1, data in one temp dir on the same disk, both fsyncing (their defaults), each matching
# workload of steward-bench on each at 1, 16, 64 and 256 clients for a fixed time, with the CPU
# and peak RSS of each cluster's three server processes during every run. Prints one table with
# the ratio steward/etcd per row and leaves it (text and Markdown) and the raw JSON reports in
# the output directory. Every process it starts is stopped by its PID at the end, also on
# failure or Ctrl-C.
#
#   bench/compare-etcd.sh [--duration 5s] [--clients "1 16 64 256"] [--value-size 256]
#                         [--workloads "create update get get-serializable list lock lock-contended"]
#                         [--out DIR (default: target/compare-etcd-<time>)]
#
# Installs Debian's etcd-server if `etcd` is missing (needs root). Ports: etcd 2379/2380,
# 22379/22380, 32379/32380; steward 17001-17003 and 17101-17103 (refused at once if taken).
# About 6 minutes on 2 cores with the defaults, once the release build is there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

duration=5s
clients="1 16 64 256"
value_size=256
workloads="create update get get-serializable list lock lock-contended"
out=""
command_line="bench/compare-etcd.sh$(printf ' %q' "$@")"
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) duration=$2; shift 2 ;;
        --clients) clients=$2; shift 2 ;;
        --value-size) value_size=$2; shift 2 ;;
        --workloads) workloads=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 1 ;;
    esac
done

die() { echo "error: $*" >&2; exit 1; }

# --- etcd, and the release build ---------------------------------------------------------------
if ! command -v etcd >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "etcd is not installed; run as root to install Debian's etcd-server"
    echo "== installing etcd-server (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
    # Debian's package may start a system etcd on 2379/2380; this comparison needs those ports.
    if command -v systemctl >/dev/null 2>&1; then systemctl stop etcd >/dev/null 2>&1 || true; fi
fi
echo "== cargo build --release (steward, steward-bench)"
cargo build --release -q --bin steward -p steward
cargo build --release -q -p steward-bench
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -E 's/.*"target_directory":"([^"]*)".*/\1/')
steward="$target_dir/release/steward"
bench="$target_dir/release/steward-bench"
compare="$target_dir/release/steward-bench-compare"
[ -n "$out" ] || out="$target_dir/compare-etcd-$(date -u +%Y%m%dT%H%M%SZ)"

etcd_client=(2379 22379 32379)
etcd_peer=(2380 22380 32380)
steward_client=(17001 17002 17003)
steward_peer=(17101 17102 17103)
for p in "${etcd_client[@]}" "${etcd_peer[@]}" "${steward_client[@]}" "${steward_peer[@]}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        die "port $p on 127.0.0.1 is in use (stop what listens there first)"
    fi
done

# --- start both clusters; stop them by PID on any exit -----------------------------------------
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/compare-etcd.XXXXXX")
pids=()
cleanup() {
    local code=$?
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ "$code" != 0 ]; then
        mkdir -p "$out/logs" && cp "$work"/*.log "$out/logs/" 2>/dev/null || true
        echo "server logs kept in $out/logs" >&2
    fi
    rm -rf "$work"
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

initial_cluster="e1=http://127.0.0.1:2380,e2=http://127.0.0.1:22380,e3=http://127.0.0.1:32380"
etcd_pids=()
for i in 0 1 2; do
    n=$((i + 1))
    etcd --name "e$n" --data-dir "$work/etcd$n" \
        --listen-client-urls "http://127.0.0.1:${etcd_client[$i]}" \
        --advertise-client-urls "http://127.0.0.1:${etcd_client[$i]}" \
        --listen-peer-urls "http://127.0.0.1:${etcd_peer[$i]}" \
        --initial-advertise-peer-urls "http://127.0.0.1:${etcd_peer[$i]}" \
        --initial-cluster "$initial_cluster" --initial-cluster-token compare-etcd \
        --initial-cluster-state new >"$work/etcd$n.log" 2>&1 &
    pids+=($!)
    etcd_pids+=($!)
done

members=""
for i in 0 1 2; do
    members+="  { id = $((i + 1)), peer_addr = \"127.0.0.1:${steward_peer[$i]}\", client_addr = \"127.0.0.1:${steward_client[$i]}\" },"$'\n'
done
steward_pids=()
for i in 0 1 2; do
    n=$((i + 1))
    cat >"$work/steward$n.toml" <<EOF
id = $n
client_addr = "127.0.0.1:${steward_client[$i]}"
peer_addr = "127.0.0.1:${steward_peer[$i]}"
data_dir = "$work/steward$n"
initial_members = [
$members]

# etcd runs without TLS here too.
[tls]
plaintext = true
EOF
    "$steward" serve --config "$work/steward$n.toml" >/dev/null 2>"$work/steward$n.log" &
    pids+=($!)
    steward_pids+=($!)
done

join() { local IFS=,; echo "$*"; }
etcd_endpoints=$(join "${etcd_client[@]/#/127.0.0.1:}")
steward_endpoints=$(join "${steward_client[@]/#/127.0.0.1:}")

# Ready when every node serves a linearizable read of a key written through it.
wait_ready() {
    local target=$1 endpoints=$2 deadline=$((SECONDS + 60)) ep
    for ep in ${endpoints//,/ }; do
        until "$bench" get --target "$target" --endpoints "$ep" --clients 1 --total 1 -o json \
            2>/dev/null | grep -q '"errors_total":0'; do
            [ $SECONDS -lt $deadline ] || die "$target at $ep not ready after 60 s (logs: $work)"
            sleep 0.2
        done
    done
}
echo "== starting 3-node etcd ($etcd_endpoints) and 3-node steward ($steward_endpoints) in $work"
wait_ready etcd "$etcd_endpoints"
wait_ready steward "$steward_endpoints"

# --- the runs ----------------------------------------------------------------------------------
runs="$out/runs.jsonl"
: >"$runs"
run_one() {
    local target=$1 workload=$2 n=$3 endpoints server_pids line
    if [ "$target" = etcd ]; then
        endpoints=$etcd_endpoints; server_pids=$(join "${etcd_pids[@]}")
    else
        endpoints=$steward_endpoints; server_pids=$(join "${steward_pids[@]}")
    fi
    line=$("$bench" "$workload" --target "$target" --endpoints "$endpoints" --clients "$n" \
        --duration "$duration" --value-size "$value_size" --server-pids "$server_pids" -o json) \
        || die "$target $workload at $n clients failed"
    echo "$line" >>"$runs"
    printf '%-17s %4s clients  %-8s %s\n' "$workload" "$n" "$target" \
        "$(echo "$line" | sed -E 's/.*"ops_per_s":([0-9.]+).*"p99":([0-9.]+).*"errors_total":([0-9]+).*/\1 ops\/s  p99 \2 ms  errors \3/')"
}
started=$SECONDS
for workload in $workloads; do
    for n in $clients; do
        run_one steward "$workload" "$n"
        run_one etcd "$workload" "$n"
    done
done

# --- the table ---------------------------------------------------------------------------------
{
    echo "steward vs etcd, $(date -u +%Y-%m-%d), $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    echo "steward $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(etcd --version | head -1); 3 nodes each on 127.0.0.1, both fsyncing"
    echo "command: $command_line  (each run $duration, value size $value_size bytes)"
    echo "RATIO = steward/etcd: above 1 is better for steward in OPS/S, below 1 in P99 and RSS;"
    echo "CPU% and RSS are the sums over the three server processes during the run."
    echo
    "$compare" "$runs"
} | tee "$out/table.txt"
"$compare" "$runs" --markdown >"$out/table.md"
echo
echo "table in $out/table.txt (Markdown: $out/table.md), reports in $runs; runs took $((SECONDS - started)) s"
