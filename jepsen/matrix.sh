#!/usr/bin/env bash
# Runs a matrix of fault-injection runs and prints one markdown table:
# workload x nemesis -> ops, ok / failed / unknown, anomalies, verdict.
#
#   jepsen/matrix.sh [--time 5m] [--jobs 1] [--nodes 3] [--out DIR] [RUN ...]
#
# A RUN is `workload:nemesis[,nemesis...]`; without any, the default matrix below runs. Each run
# uses its own seed (1, 2, ...), its own network namespaces and its own directory under --out
# (default jepsen-runs/matrix-<unix time>), where the table is also written (table.md). --jobs
# runs that many at once (each run is 3-5 steward processes and a client: on 2 cores, 2 at most).
# Needs root, a release build of steward (built first) and, for `clock`, Debian's faketime.
set -euo pipefail
cd "$(dirname "$0")/.."

time=5m
jobs=1
nodes=3
out="jepsen-runs/matrix-$(date +%s)"
runs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --time) time="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        --nodes) nodes="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        -*) echo "matrix.sh: unknown option $1" >&2; exit 2 ;;
        *) runs+=("$1"); shift ;;
    esac
done
all=partition,kill,pause,loss,clock,membership
if [ ${#runs[@]} -eq 0 ]; then
    runs=(
        "register:$all" "set:$all" "lock:$all" "watch:$all" "operations:$all" "lease:$all"
        "ttl:$all" "etcd-register:$all" "etcd-lock:$all"
        register:partition register:kill register:pause register:loss register:clock
        register:membership
        lock:partition lock:kill lock:pause lock:loss lock:clock lock:membership
    )
fi

cargo build -q --release --bin steward
cargo build -q --release -p jepsen
mkdir -p "$out"

# One run: `seed workload:nemesis`; its summary line goes to <dir>/summary.
one() {
    local seed="$1" workload="${2%%:*}" nemesis="${2#*:}"
    local dir="$out/$seed-$workload-${nemesis//,/+}"
    set +e
    target/release/jepsen --workload "$workload" --nemesis "$nemesis" --time "$time" \
        --seed "$seed" --nodes "$nodes" --steward-bin target/release/steward --out "$dir" \
        >"$dir.stdout" 2>"$dir.stderr"
    echo "exit $?" >>"$dir.stdout"
    set -e
    echo "$(tail -n 2 "$dir.stdout" | head -n 1)"
}
export -f one
export out time nodes

i=0
for r in "${runs[@]}"; do
    i=$((i + 1))
    echo "$i $r"
done | xargs -P "$jobs" -L 1 bash -c 'one "$0" "$1"' | sed 's/^/  /'

table="$out/table.md"
{
    echo "| workload | nemesis | ops | ok / failed / unknown | anomalies | verdict |"
    echo "|---|---|---|---|---|---|"
    i=0
    for r in "${runs[@]}"; do
        i=$((i + 1))
        workload="${r%%:*}" nemesis="${r#*:}"
        dir="$out/$i-$workload-${nemesis//,/+}"
        line=$(grep -m1 "^$workload: " "$dir.stdout" 2>/dev/null || true)
        if [ -z "$line" ]; then
            echo "| $workload | $nemesis | - | - | - | ERROR: $(tail -n 1 "$dir.stderr" 2>/dev/null) |"
            continue
        fi
        ops=$(sed -E 's/^[a-z]+: ([0-9]+) .*/\1/' <<<"$line")
        counts=$(sed -E 's/^[^(]*\(([0-9]+) ok, ([0-9]+) failed, ([0-9]+) unknown\).*/\1 \/ \2 \/ \3/' <<<"$line")
        anomalies=$(sed -E 's/.*anomalies ([0-9]+).*/\1/' <<<"$line")
        verdict=$(sed -E 's/.*: (VALID|INVALID|UNKNOWN) .*/\1/' <<<"$line")
        echo "| $workload | $nemesis | $ops | $counts | $anomalies | $verdict |"
    done
} >"$table"
cat "$table"
echo "runs in $out"
