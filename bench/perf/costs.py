#!/usr/bin/env python3
"""Where the servers' CPU went, by cost: reads `perf script` output of a recording made with call
graphs (bench/compare-etcd.sh --perf), attributes every sample to the first frame from the leaf
up that matches one of RULES (so a memcpy inside a JSON encoder counts as JSON, the same memcpy
inside a log entry clone as the clone), and prints the share of each cost, overall and per
server process (the leader is the one with the most samples in a write workload).

    perf script -i create-64-1.data --no-inline -F pid,tid,comm,ip,sym | bench/perf/costs.py
"""
import re
import sys
from collections import Counter, defaultdict

# (cost, pattern on a frame's symbol), tried in order on each frame from the leaf up.
RULES = [
    ("log: fsync (fdatasync)", r"fdatasync|sync_data|do_fsync"),
    ("log: WAL write/append (raft-log)", r"raft_log::|chunked_wal::"),
    ("log: clone of cached entries for apply/replication", r"EntryPayload.*Clone|log_store::tail::assemble"),
    ("JSON encode/decode", r"serde_json|serde_core::|serde::"),
    ("protobuf encode/decode", r"prost::|ProstCodec|ProstEncoder|ProstDecoder"),
    ("apply (state machine)", r"steward_core::apply|apply_batch|steward_core::"),
    ("watch/observer fan-out", r"server::watch|on_applied"),
    ("tracing/metrics", r"tracing_subscriber|tracing::|prometheus_client|metrics::"),
    ("auth / limits layers", r"server::auth|client_limits|governor"),
    ("openraft core", r"openraft::"),
    ("gRPC/HTTP2 (tonic, hyper, h2)", r"tonic::|hyper::|hyper_util::|\bh2::"),
    ("kernel: network send/recv", r"tcp_|sock_|__sys_sendto|__sys_recvfrom|writev|readv|do_iter_readv_writev|ip_|net_rx|__netif|loopback"),
    ("kernel: futex/wakeups/scheduling", r"futex|schedule|finish_task_switch|try_to_wake_up|ttwu|epoll|ep_poll"),
    ("allocator", r"_rjem_|je_|malloc|free\b|realloc"),
    ("tokio runtime", r"tokio::"),
    ("steward server (other)", r"steward::"),
]
COMPILED = [(name, re.compile(pat)) for name, pat in RULES]


def classify(frames):
    for sym in frames:
        for name, rx in COMPILED:
            if rx.search(sym):
                return name
    return "other (unresolved stacks, libc, kernel)"


def samples(lines):
    head, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if head is not None:
                yield head, frames
            head, frames = None, []
        elif not line.startswith((" ", "\t")):
            head, frames = line, []
        else:
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else parts[0])
    if head is not None:
        yield head, frames


def main():
    total, by_cost = 0, Counter()
    by_pid = defaultdict(Counter)
    for head, frames in samples(sys.stdin):
        m = re.match(r"\s*\S.*?\s+(\d+)/(\d+)|\s*\S+\s+(\d+)", head)
        pid = next((g for g in (m.groups() if m else ()) if g), "?")
        cost = classify(frames)
        total += 1
        by_cost[cost] += 1
        by_pid[pid][cost] += 1
    if not total:
        sys.exit("no samples on standard input")
    pids = sorted(by_pid, key=lambda p: -sum(by_pid[p].values()))
    print(f"{total} samples; per process: " + ", ".join(
        f"{p}: {100 * sum(by_pid[p].values()) / total:.1f}%" for p in pids))
    print(f"{'cost':<52} {'all':>6} " + " ".join(f"{p:>8}" for p in pids))
    for cost, n in by_cost.most_common():
        if n * 200 < total:
            continue
        row = " ".join(f"{100 * by_pid[p][cost] / max(1, sum(by_pid[p].values())):7.1f}%" for p in pids)
        print(f"{cost:<52} {100 * n / total:5.1f}% {row}")


if __name__ == "__main__":
    main()
