"""A watch survives the death of the node serving it: resumed elsewhere, no gap, no repeat."""

from __future__ import annotations

import os
import signal
import threading

from steward import Watch, WatchEvent

#: Longest a test waits for its events before closing the watch (which fails it).
EVENTS_TIMEOUT_S = 30.0


def director(name: str, batch: str, replicas: int = 1) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Director",
        "metadata": {"name": name, "labels": {"batch": batch}},
        "spec": {"replicas": replicas},
    }


def take(watch: Watch, n: int) -> list[WatchEvent]:
    """The next ``n`` events; fewer if the watch is closed by the watchdog."""
    watchdog = threading.Timer(EVENTS_TIMEOUT_S, watch.close)
    watchdog.start()
    try:
        events = []
        for event in watch:
            events.append(event)
            if len(events) == n:
                break
        return events
    finally:
        watchdog.cancel()


def test_watch_resumes_after_its_node_is_killed(cluster, unique: str) -> None:  # noqa: ANN001
    follower = cluster.followers()[0]
    reader = cluster.client([follower, *[e for e in cluster.endpoints if e != follower]])
    writer = cluster.client()
    expected: list[tuple[str, str, int]] = []

    def write(kind: str, name: str, replicas: int = 1) -> None:
        if kind == "ADDED":
            obj = writer.create(director(name, unique, replicas))
        elif kind == "MODIFIED":
            obj = writer.update(director(name, unique, replicas))
        else:
            obj = writer.delete("Director", name)
        expected.append((kind, name, int(obj["metadata"]["resourceVersion"])))

    with reader.watch("Director", selector=f"batch={unique}") as watch:
        for i in range(3):
            write("ADDED", f"{unique}-{i}")
        before = take(watch, 3)
        assert watch.endpoint == follower
        pid = cluster.pid(follower)

        os.kill(pid, signal.SIGKILL)
        write("MODIFIED", f"{unique}-2", replicas=2)
        write("ADDED", f"{unique}-3")
        write("DELETED", f"{unique}-0")
        after = take(watch, 3)
        assert watch.resumes >= 1
        assert watch.endpoint != follower

    seen = [(e.type, e.object["metadata"]["name"], e.revision) for e in before + after]
    assert seen == expected, "every change once, in order"
    cluster.wait_ready(not_pid={follower: pid})
