"""A real 3-node steward cluster for the suite: `steward dev` on free ports in a temp dir.

STEWARD_BIN names the binary (default: the repo's target/debug/steward). The cluster is started
once per session and is ready when Cluster.Status names a leader and every node serves; it is
stopped with SIGTERM (steward dev stops its nodes) at the end. A start whose ports were taken by
another process in the meantime is made again on other ports (up to START_TRIES times); any
other early exit fails at once with the end of its output.

`small_history_node` is a one-node cluster of its own (`steward serve` on a config written here)
whose node keeps only SMALL_HISTORY events of watch history, for tests that outrun it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from steward import Client, StewardError

REPO = Path(__file__).resolve().parents[3]
#: How long the cluster gets to elect a leader and serve (debug builds on two busy cores).
READY_TIMEOUT_S = 60.0
#: How often readiness is asked.
READY_POLL_S = 0.2
START_TRIES = 3
NODES = 3
#: steward dev's port layout: client base+N, peer base+100+N, metrics base+200+N.
PORT_OFFSETS = (0, 100, 200)
#: A node killed by a test is restarted by steward dev after this long.
RESTART_DELAY_MS = 500
#: limits.watch_history of `small_history_node`: a list's continue token expires after more
#: writes than this.
SMALL_HISTORY = 6


def steward_bin() -> Path:
    raw = os.environ.get("STEWARD_BIN")
    path = Path(raw).resolve() if raw else REPO / "target" / "debug" / "steward"
    if not path.is_file():
        pytest.fail(f"no steward binary at {path}: build it (cargo build --bin steward) or set STEWARD_BIN")
    return path


@dataclass
class Cluster:
    """The running cluster: its endpoints, and a way to find and kill its nodes."""

    endpoints: list[str]
    process: subprocess.Popen
    data_dir: Path
    log_path: Path
    clients: list[Client] = field(default_factory=list)

    def client(self, endpoints: list[str] | None = None, timeout: float = 10.0) -> Client:
        """A client of the given endpoints (default: all), closed at the end of the session."""
        c = Client(endpoints or self.endpoints, timeout=timeout)
        self.clients.append(c)
        return c

    def status(self, timeout: float = 5.0):  # noqa: ANN201
        return self.client(timeout=timeout).cluster_status()

    def leader(self) -> str:
        """The leader's client address, as the nodes say now."""
        status = self.status()
        return next(n.client_addr for n in status.nodes if n.id == status.leader_id)

    def followers(self) -> list[str]:
        leader = self.leader()
        return [e for e in self.endpoints if e != leader]

    def pid(self, endpoint: str) -> int:
        node = next(n for n in self.status().nodes if n.client_addr == endpoint)
        assert node.pid > 0, f"node {endpoint} reports no pid"
        return int(node.pid)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S, *, not_pid: dict[str, int] | None = None) -> None:
        """Waits until a leader is elected and every node serves (and, for each endpoint in
        ``not_pid``, runs under another pid: it was restarted)."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        probe = Client(self.endpoints, timeout=2.0)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    pytest.fail(f"steward dev exited ({self.process.returncode}):\n{self.log_tail()}")
                try:
                    status = probe.cluster_status()
                    serving = {n.client_addr for n in status.nodes if n.serving}
                    pids = {n.client_addr: n.pid for n in status.nodes}
                    restarted = all(pids.get(e) not in (None, 0, p) for e, p in (not_pid or {}).items())
                    if status.leader_id and serving >= set(self.endpoints) and restarted:
                        return
                    last = f"leader {status.leader_id}, serving {sorted(serving)}, pids {pids}"
                except StewardError as err:
                    last = str(err)
                time.sleep(READY_POLL_S)
        finally:
            probe.close()
        pytest.fail(f"cluster not ready within {timeout}s ({last}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _ports_free(base: int) -> bool:
    for offset in PORT_OFFSETS:
        for node in range(1, NODES + 1):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + offset + node))
                except OSError:
                    return False
    return True


def _start(binary: Path, root: Path) -> Cluster:
    for _ in range(100):
        base = random.randrange(20000, 60000, 10)
        if _ports_free(base):
            break
    data_dir = root / f"data-{uuid.uuid4().hex[:6]}"
    log_path = root / f"dev-{base}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                str(binary),
                "dev",
                "--nodes",
                str(NODES),
                "--data-dir",
                str(data_dir),
                "--base-port",
                str(base),
                "--restart-delay-ms",
                str(RESTART_DELAY_MS),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    endpoints = [f"127.0.0.1:{base + n}" for n in range(1, NODES + 1)]
    return Cluster(endpoints=endpoints, process=process, data_dir=data_dir, log_path=log_path)


def _stop(cluster: Cluster) -> None:
    for c in cluster.clients:
        c.close()
    if cluster.process.poll() is None:
        cluster.process.send_signal(signal.SIGTERM)
        try:
            cluster.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(cluster.process.pid, signal.SIGKILL)
            cluster.process.wait()


def _start_node(binary: Path, root: Path, limits: dict[str, int]) -> Cluster:
    """One node that is the whole cluster, run by `steward serve` on a config with ``limits``."""
    # Two free ports, client and peer, held together so they differ; one taken between here
    # and the node's bind fails the start with "already in use", and _started tries again.
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        client_addr, peer_addr = (f"127.0.0.1:{s.getsockname()[1]}" for s in (a, b))
    node_dir = root / f"node-{uuid.uuid4().hex[:6]}"
    node_dir.mkdir()
    config = node_dir / "node1.toml"
    member = f"{{ id = 1, peer_addr = {json.dumps(peer_addr)}, client_addr = {json.dumps(client_addr)} }}"
    lines = [
        "id = 1",
        f"client_addr = {json.dumps(client_addr)}",
        f"peer_addr = {json.dumps(peer_addr)}",
        f"data_dir = {json.dumps(str(node_dir / 'data'))}",
        f"initial_members = [{member}]",
        "[tls]",
        "plaintext = true",
        "[limits]",
        *(f"{key} = {value}" for key, value in limits.items()),
    ]
    config.write_text("\n".join(lines) + "\n")
    log_path = node_dir / "serve.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(binary), "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Cluster(endpoints=[client_addr], process=process, data_dir=node_dir, log_path=log_path)


def _started(start: Callable[[], Cluster]) -> Cluster:
    """``start()`` until its cluster is ready, again when another process took a port between
    the check and the bind (up to START_TRIES times)."""
    for attempt in range(1, START_TRIES + 1):
        c = start()
        try:
            c.wait_ready()
            return c
        except pytest.fail.Exception:
            _stop(c)
            if attempt < START_TRIES and "already in use" in c.log_tail():
                continue
            raise
    raise AssertionError("unreachable: the last try returns or raises")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    binary = steward_bin()
    root = tmp_path_factory.mktemp("steward")
    c = _started(lambda: _start(binary, root))
    yield c
    _stop(c)


@pytest.fixture(scope="module")
def small_history_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A one-node cluster whose node keeps SMALL_HISTORY events of watch history."""
    binary = steward_bin()
    root = tmp_path_factory.mktemp("small-history")
    c = _started(lambda: _start_node(binary, root, {"watch_history": SMALL_HISTORY}))
    yield c
    _stop(c)


@pytest.fixture
def client(cluster: Cluster) -> Client:
    return cluster.client()


@pytest.fixture
def unique() -> str:
    """A name no other test uses."""
    return f"py-{uuid.uuid4().hex[:8]}"
