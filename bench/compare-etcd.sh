#!/usr/bin/env bash
# steward and etcd side by side on this machine (issue 5; method of issue 21; --api etcd of
# issue 25): a 3-node etcd and a 3-node steward on 127.0.0.1, each fsyncing (their defaults),
# on each matching workload of steward-bench at 1, 16, 64 and 256 clients. Every run is on its
# own fresh cluster with nothing else running: the script starts the cluster on an empty data
# dir, waits until every node serves, lets the clients warm up (not measured), measures, stops
# the cluster and deletes its data. Each cell (workload x clients) is run --reps times per
# system, interleaved (A B A B A B; which system goes first alternates from cell to cell). Both
# systems hold the same bytes per object: etcd's value is the JSON document steward stores. The
# table gives, per system, the median and the range over the repetitions of throughput, p50,
# p99 and the servers' CPU per operation, the ratios steward/etcd, and above it what each
# workload does on each system. The table (text and Markdown) and the raw JSON reports stay in
# the output directory. Every process it starts is stopped by its PID, also on failure or
# Ctrl-C.
#
# Which API steward is driven through (the table's STEWARD-API column says it on every row):
#   --api steward (default)  its own API (steward-bench --target steward); etcd gets the matching
#                            etcd operations. Workloads: create update get get-serializable list
#                            lock lock-contended (and watch on request).
#   --api etcd               its etcd v3 endpoint: steward-bench --target etcd at steward's client
#                            ports, the very same client and requests as at etcd's. Workloads:
#                            put (create update), range (get), txn, lease-keep-alive, watch (and
#                            get-serializable list lock lock-contended on request).
# watch runs have no warm-up (steward-bench has none for it; its clock starts once every watcher
# has seen the marker).
#
#   bench/compare-etcd.sh [--api steward|etcd] [--duration 5s] [--warmup 2s] [--reps 3]
#                         [--clients "1 16 64 256"] [--value-size 256] [--workloads "..."]
#                         [--profile release] [--out DIR (default: target/compare-etcd-<time>)]
#                         [--perf]
#
# --perf: records each steward run's three servers with `perf record` (call graphs from DWARF, 999
# samples per second, from the start of the warm-up to the end of the run) into
# <out>/perf/<workload>-<clients>-<rep>.data, and writes beside it a .top.txt: the symbols with
# at least 0.5% of the samples, by self time and with children, and the samples by thread (needs
# Linux perf; root, or kernel.perf_event_paranoid <= 1). bench/perf/costs.py turns a recording
# into a table of costs. The figures of a recorded run are lower than without it.
# --profile: the cargo profile built and run (`dev` for a smoke run with the debug build, whose
# figures mean nothing). Installs Debian's etcd-server if `etcd` is missing (needs root). Ports:
# etcd 2379/2380, 22379/22380, 32379/32380; steward 27001-27003 and 27101-27103 (checked free
# before each start). With the defaults: 7 x 4 cells x 3 reps x 2 systems = 168 runs of about
# 12 s each (start, warm-up, 5 s measured, stop), about 35 minutes on 2 cores once the release
# build is there; with --api etcd 6 x 4 x 3 x 2 = 144 runs, about 30 minutes.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/.."
root=$(pwd)

api=steward
duration=5s
warmup=2s
reps=3
clients="1 16 64 256"
value_size=256
workloads=""
profile=release
out=""
perf=false
command_line="bench/compare-etcd.sh$(printf ' %q' "$@")"
while [ $# -gt 0 ]; do
    case "$1" in
        --api) api=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        --clients) clients=$2; shift 2 ;;
        --value-size) value_size=$2; shift 2 ;;
        --workloads) workloads=$2; shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --perf) perf=true; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$self"; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 1 ;;
    esac
done

die() { echo "error: $*" >&2; exit 1; }
case "$reps" in ''|*[!0-9]*|0) die "--reps: a whole number, at least 1" ;; esac
case "$api" in
    steward) [ -n "$workloads" ] || workloads="create update get get-serializable list lock lock-contended" ;;
    etcd) [ -n "$workloads" ] || workloads="create update get txn lease-keep-alive watch" ;;
    *) die "--api: steward or etcd, not '$api'" ;;
esac
for w in $workloads; do
    case "$w" in
        txn|lease-keep-alive) [ "$api" = etcd ] || die "--workloads: $w is an etcd v3 workload; run it with --api etcd" ;;
        create|update|get|get-serializable|list|lock|lock-contended|watch) ;;
        *) die "--workloads: $w is not a workload both systems run (see --help)" ;;
    esac
done

if $perf; then command -v perf >/dev/null 2>&1 || die "--perf: Linux perf is not installed (Debian: linux-perf)"; fi

# --- etcd, and the release build ---------------------------------------------------------------
if ! command -v etcd >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "etcd is not installed; run as root to install Debian's etcd-server"
    echo "== installing etcd-server (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
    # Debian's package may start a system etcd on 2379/2380; this comparison needs those ports.
    if command -v systemctl >/dev/null 2>&1; then systemctl stop etcd >/dev/null 2>&1 || true; fi
fi
echo "== cargo build --profile $profile (steward, steward-bench)"
cargo build --profile "$profile" -q --bin steward -p steward
cargo build --profile "$profile" -q -p steward-bench
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -E 's/.*"target_directory":"([^"]*)".*/\1/')
profile_dir=$profile
[ "$profile" != dev ] || profile_dir=debug # cargo's directory for its dev profile
steward="$target_dir/$profile_dir/steward"
bench="$target_dir/$profile_dir/steward-bench"
compare="$target_dir/$profile_dir/steward-bench-compare"
[ -n "$out" ] || out="$target_dir/compare-etcd-$(date -u +%Y%m%dT%H%M%SZ)"

etcd_client=(2379 22379 32379)
etcd_peer=(2380 22380 32380)
# Above the 10000..20000 the cluster tests hand out, below the kernel's ephemeral range.
steward_client=(27001 27002 27003)
steward_peer=(27101 27102 27103)
ports_free() {
    local p
    for p in "$@"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            die "port $p on 127.0.0.1 is in use (stop what listens there first)"
        fi
    done
}
all_ports=("${etcd_client[@]}" "${etcd_peer[@]}" "${steward_client[@]}" "${steward_peer[@]}")
ports_free "${all_ports[@]}"

# --- clusters, one at a time; whatever runs is stopped by PID on any exit ----------------------
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/compare-etcd.XXXXXX")
live=()        # PIDs of the cluster that runs now
cluster_dir="" # its data and logs
stop_cluster() {
    local pid
    for pid in "${live[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${live[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    live=()
}
cleanup() {
    local code=$?
    trap - EXIT INT TERM
    stop_cluster
    if [ "$code" != 0 ] && [ -n "$cluster_dir" ]; then
        mkdir -p "$out/logs" && cp "$cluster_dir"/*.log "$out/logs/" 2>/dev/null || true
        echo "server logs of the failed run kept in $out/logs" >&2
    fi
    rm -rf "$work"
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

join() { local IFS=,; echo "$*"; }
etcd_endpoints=$(join "${etcd_client[@]/#/127.0.0.1:}")
steward_endpoints=$(join "${steward_client[@]/#/127.0.0.1:}")

start_etcd() {
    local dir=$1 i n
    local initial="e1=http://127.0.0.1:2380,e2=http://127.0.0.1:22380,e3=http://127.0.0.1:32380"
    for i in 0 1 2; do
        n=$((i + 1))
        etcd --name "e$n" --data-dir "$dir/etcd$n" \
            --listen-client-urls "http://127.0.0.1:${etcd_client[$i]}" \
            --advertise-client-urls "http://127.0.0.1:${etcd_client[$i]}" \
            --listen-peer-urls "http://127.0.0.1:${etcd_peer[$i]}" \
            --initial-advertise-peer-urls "http://127.0.0.1:${etcd_peer[$i]}" \
            --initial-cluster "$initial" --initial-cluster-token compare-etcd \
            --initial-cluster-state new >"$dir/etcd$n.log" 2>&1 &
        live+=($!)
    done
}

start_steward() {
    local dir=$1 i n members=""
    for i in 0 1 2; do
        members+="  { id = $((i + 1)), peer_addr = \"127.0.0.1:${steward_peer[$i]}\", client_addr = \"127.0.0.1:${steward_client[$i]}\" },"$'\n'
    done
    for i in 0 1 2; do
        n=$((i + 1))
        cat >"$dir/steward$n.toml" <<TOML
id = $n
client_addr = "127.0.0.1:${steward_client[$i]}"
peer_addr = "127.0.0.1:${steward_peer[$i]}"
data_dir = "$dir/steward$n"
initial_members = [
$members]

# etcd runs without TLS here too.
[tls]
plaintext = true
TOML
        "$steward" serve --config "$dir/steward$n.toml" >/dev/null 2>"$dir/steward$n.log" &
        live+=($!)
    done
}

# Ready when every node serves a linearizable read of a key written through it (one key per
# node: the only data a run finds when its clients start).
wait_ready() {
    local target=$1 endpoints=$2 deadline=$((SECONDS + 60)) ep
    for ep in ${endpoints//,/ }; do
        until "$bench" get --target "$target" --endpoints "$ep" --clients 1 --total 1 -o json \
            2>/dev/null | grep -q '"errors_total":0'; do
            [ $SECONDS -lt $deadline ] || die "$target at $ep not ready after 60 s (logs: $cluster_dir)"
            sleep 0.2
        done
    done
}

# The costliest symbols of a perf recording: by self time, then with what they call.
perf_top() {
    local data=$1
    {
        echo "== self (symbols with >= 0.5% of the samples)"
        perf report -i "$data" --stdio --no-inline --no-children --no-call-graph --percent-limit 0.5 --sort symbol 2>/dev/null | grep -v '^#' | sed -E '/^$/d; s/ +- +- *$//'
        echo
        echo "== with children"
        perf report -i "$data" --stdio --no-inline --children --no-call-graph --percent-limit 0.5 --sort symbol 2>/dev/null | grep -v '^#' | sed -E '/^$/d; s/ +- +- *$//'
        echo
        echo "== by thread (tid:name) of the three servers"
        perf report -i "$data" --stdio --no-inline --no-children --no-call-graph --sort pid 2>/dev/null | grep -v '^#' | sed -E '/^$/d; s/ +- +- *$//'
    } >"${data%.data}.top.txt"
}

# --- the runs ----------------------------------------------------------------------------------
runs="$out/runs.jsonl"
: >"$runs"
run_one() {
    local system=$1 workload=$2 n=$3 rep=$4 endpoints target label line warm=()
    cluster_dir="$work/$system-$workload-$n-$rep"
    mkdir "$cluster_dir" # new and empty: no data of an earlier run
    # Both systems' ports: nothing of the previous run, of either system, is still up.
    ports_free "${all_ports[@]}"
    if [ "$system" = etcd ]; then
        endpoints=$etcd_endpoints
        target=etcd
        label=etcd
        start_etcd "$cluster_dir"
    else
        endpoints=$steward_endpoints
        target=$api # with --api etcd: the etcd client, at steward's client ports
        label="steward ($api API)"
        start_steward "$cluster_dir"
    fi
    wait_ready "$target" "$endpoints"
    [ "$workload" = watch ] || warm=(--warmup "$warmup")
    local recorder="" record=""
    if $perf && [ "$system" = steward ]; then
        mkdir -p "$out/perf"
        record="$out/perf/$workload-$n-$rep.data"
        perf record -q -F 999 --call-graph dwarf,16384 -p "$(join "${live[@]}")" -o "$record" \
            >/dev/null 2>&1 &
        recorder=$!
    fi
    line=$("$bench" "$workload" --target "$target" --endpoints "$endpoints" --clients "$n" \
        ${warm[@]+"${warm[@]}"} --duration "$duration" --value-size "$value_size" \
        --server-pids "$(join "${live[@]}")" -o json) \
        || die "$label $workload at $n clients (rep $rep) failed"
    if [ -n "$recorder" ]; then
        kill -INT "$recorder" 2>/dev/null || true
        wait "$recorder" || true # perf exits non-zero when interrupted
        perf_top "$record"
    fi
    stop_cluster
    rm -rf "$cluster_dir"
    cluster_dir=""
    # Which repetition this was and which system served it (with --api etcd both reports say
    # "target":"etcd"), for the table and whoever reads the raw reports.
    echo "{\"rep\":$rep,\"system\":\"$system\",\"steward_api\":\"$api\",${line#\{}" >>"$runs"
    printf '%-17s %4s clients  rep %s/%s  %-20s %s\n' "$workload" "$n" "$rep" "$reps" "$label" \
        "$(echo "$line" | sed -E 's/.*"ops_per_s":([0-9.]+).*"p99":([0-9.]+).*"errors":\{[^}]*\},"errors_total":([0-9]+).*/\1 ops\/s  p99 \2 ms  errors \3/')"
}
cells=0
for _ in $workloads; do for _ in $clients; do cells=$((cells + 1)); done; done
echo "== steward through its $api API vs etcd: $cells cells x $reps reps x 2 systems, each run on a fresh cluster: warm-up $warmup, measured $duration"
started=$SECONDS
cell=0
for workload in $workloads; do
    for n in $clients; do
        if [ $((cell % 2)) = 0 ]; then order="steward etcd"; else order="etcd steward"; fi
        cell=$((cell + 1))
        for rep in $(seq "$reps"); do
            for system in $order; do
                run_one "$system" "$workload" "$n" "$rep"
            done
        done
    done
done

# --- the table ---------------------------------------------------------------------------------
{
    echo "steward vs etcd, $(date -u +%Y-%m-%d), $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    echo "steward $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(etcd --version | head -1); 3 nodes each on 127.0.0.1, both fsyncing"
    if [ "$api" = etcd ]; then
        echo "steward driven through its etcd v3 endpoint: the same steward-bench etcd client (--target etcd) at both systems"
    else
        echo "steward driven through its own API (--target steward), etcd through the matching etcd operations (--target etcd)"
    fi
    [ "$profile" = release ] || echo "cargo profile $profile, not release: these figures say nothing about speed"
    echo "command: $command_line"
    echo "method: $reps runs per system and cell, interleaved (the first system alternates by cell); each run on a fresh"
    echo "cluster (empty data dir, the other system stopped), $warmup of warm-up not measured (none for watch), then $duration measured;"
    echo "value size $value_size bytes of spec data"
    echo
    "$compare" "$runs"
} | tee "$out/table.txt"
"$compare" "$runs" --markdown >"$out/table.md"
echo
echo "table in $out/table.txt (Markdown: $out/table.md), reports in $runs; runs took $((SECONDS - started)) s"
