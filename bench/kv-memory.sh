#!/usr/bin/env bash
# What the multi-version keyspace costs, and what a compaction gives back (issue 25): a 3-node
# steward (`steward dev`, release build, on --base-port) gets --keys keys through its etcd API,
# each put about --versions times with a --value-size document (steward-bench's `update`
# workload with --target etcd: one key per client). Then, before and after `etcdctl compact` to
# the current revision and a `etcdctl defrag` (steward's compact: snapshot and log truncation)
# of every node, and 30 s later, it reads the versions and bytes the keyspace holds (steward_kv_versions,
# steward_kv_data_bytes), each node's resident memory, the size of `etcdctl snapshot save` and of
# the data directories, and prints one Markdown table.
#
#   bench/kv-memory.sh [--keys 500] [--versions 200] [--value-size 1024] [--base-port 28000]
#                      [--profile release] [--out DIR (default: target/kv-memory-<time>)]
#
# Needs etcdctl (Debian's etcd-client). Every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

keys=500
versions=200
value_size=1024
base_port=28000
profile=release
out=""
command_line="bench/kv-memory.sh$(printf ' %q' "$@")"
while [ $# -gt 0 ]; do
    case "$1" in
        --keys) keys=$2; shift 2 ;;
        --versions) versions=$2; shift 2 ;;
        --value-size) value_size=$2; shift 2 ;;
        --base-port) base_port=$2; shift 2 ;;
        --profile) profile=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 1 ;;
    esac
done
die() { echo "error: $*" >&2; exit 1; }
for n in "$keys" "$versions" "$value_size" "$base_port"; do
    case "$n" in ''|*[!0-9]*|0) die "--keys, --versions, --value-size, --base-port: whole numbers, at least 1" ;; esac
done
command -v etcdctl >/dev/null 2>&1 || die "etcdctl is missing: apt-get install etcd-client"

echo "== cargo build --profile $profile (steward, steward-bench)" >&2
cargo build --profile "$profile" -q --bin steward -p steward
cargo build --profile "$profile" -q -p steward-bench
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -E 's/.*"target_directory":"([^"]*)".*/\1/')
profile_dir=$profile
[ "$profile" != dev ] || profile_dir=debug
steward="$target_dir/$profile_dir/steward"
bench="$target_dir/$profile_dir/steward-bench"
[ -n "$out" ] || out="$target_dir/kv-memory-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"

clients=() metrics=()
for i in 1 2 3; do
    clients+=("127.0.0.1:$((base_port + i))")
    metrics+=("127.0.0.1:$((base_port + 200 + i))")
done
endpoints=$(IFS=,; echo "${clients[*]}")
export ETCDCTL_API=3

data=$(mktemp -d "${TMPDIR:-/tmp}/kv-memory.XXXXXX")
dev_pid=""
cleanup() {
    [ -z "$dev_pid" ] || { kill -INT "$dev_pid" 2>/dev/null || true; wait "$dev_pid" 2>/dev/null || true; }
    rm -rf "$data"
}
trap cleanup EXIT INT TERM

"$steward" dev --data-dir "$data" --base-port "$base_port" > "$out/dev.log" 2>&1 &
dev_pid=$!
for _ in $(seq 300); do
    etcdctl --endpoints="$endpoints" endpoint health >/dev/null 2>&1 && break
    kill -0 "$dev_pid" 2>/dev/null || die "steward dev exited; see $out/dev.log"
    sleep 0.2
done
etcdctl --endpoints="$endpoints" endpoint health >/dev/null 2>&1 || die "the cluster never became healthy"

metric() { # metric NAME: its value on node 1
    curl -s "http://${metrics[0]}/metrics" | awk -v m="$1" '$1 == m { print $2; exit }'
}
rss_mib() { # the nodes' resident memory, MiB, summed
    local total=0 pid
    for pid in $(pgrep -f -- "serve.*$data" || true); do
        total=$((total + $(awk '/VmRSS/ { print $2 }' "/proc/$pid/status")))
    done
    printf "%.1f" "$(echo "scale=2; $total / 1024" | bc)"
}
mib() { printf "%.2f" "$(echo "scale=4; $1 / 1048576" | bc)"; }
revision() { etcdctl --endpoints="${clients[0]}" get none -w json | jq -r .header.revision; }
measure() { # measure LABEL
    local snap="$out/snapshot-$1.db"
    etcdctl --endpoints="${clients[0]}" snapshot save "$snap" >/dev/null
    printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$(metric steward_kv_versions)" \
        "$(mib "$(metric steward_kv_data_bytes)")" "$(rss_mib)" \
        "$(mib "$(stat -c %s "$snap")")" "$(mib "$(du -sb "$data" | cut -f1)")" >> "$out/table.md"
    rm -f "$snap"
}

total=$((keys * versions))
echo "== $keys keys x about $versions versions of $value_size bytes: $total puts" >&2
"$bench" update --target etcd --endpoints "$endpoints" --clients "$keys" --total "$total" \
    --value-size "$value_size" -o json > "$out/load.json"

{
    echo "$command_line ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, steward $profile build)"
    echo
    echo "| when | kv versions | kv data MiB | RSS MiB (3 nodes) | snapshot MiB | data dirs MiB |"
    echo "|---|---|---|---|---|---|"
} > "$out/table.md"
measure "after $total puts"
rev=$(revision)
etcdctl --endpoints="${clients[0]}" compact "$rev" --physical >/dev/null
measure "compacted at $rev"
for e in "${clients[@]}"; do etcdctl --endpoints="$e" defrag >/dev/null; done
measure "and defragmented"
# The allocator hands freed pages back to the system over seconds (jemalloc's decay).
sleep 30
measure "30 s later"
cat "$out/table.md"
echo "(table and load report in $out)" >&2
