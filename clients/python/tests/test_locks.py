"""Locks with fencing: a holder that outlived its TTL has its fenced writes refused."""

from __future__ import annotations

import time

import pytest

import steward
from steward import Client
from steward.v1 import steward_pb2 as pb

#: Longest a test waits for a lock change it caused.
WAIT_S = 15.0
POLL_S = 0.1


def director(name: str, replicas: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Director",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    }


def holders(client: Client, name: str) -> list:
    try:
        return list(client.call("Locks", "Get", pb.GetLockRequest(name=name), write=False).holders)
    except steward.NotFound:
        return []


def test_a_stale_token_is_refused_by_the_store(client: Client, unique: str) -> None:
    client.create(director(unique, 1))
    name = f"{unique}-lock"
    # A holder that stops refreshing (as if paused) past its TTL.
    a = client.lock(name, holder="a", ttl=1.0, refresh=False).acquire()
    client.update(director(unique, 2), fence=a)

    # b waits in the queue: granted once a expired and the lock-delay (5 s) ended.
    b = client.lock(name, holder="b", ttl=10.0, wait=WAIT_S).acquire()
    try:
        assert b.token > a.token
        with pytest.raises(steward.FenceRejected) as rejected:
            client.update(director(unique, 3), fence=a)
        assert rejected.value.reason == "FENCE_REJECTED"
        with pytest.raises(steward.LockNotHeld):
            a.refresh()
        client.update(director(unique, 4), fence=b)
    finally:
        b.release()
    assert client.get("Director", unique)["spec"] == {"replicas": 4}
    assert holders(client, name) == []


def test_the_helper_refreshes_while_held_and_releases_on_exit(client: Client, unique: str) -> None:
    name = f"{unique}-lock"
    with client.lock(name, ttl=1.5) as lock:
        assert lock.token > 0
        (first,) = holders(client, name)
        deadline = time.monotonic() + WAIT_S
        while holders(client, name)[0].expires_at_ms <= first.expires_at_ms:
            assert time.monotonic() < deadline, "the TTL was never refreshed"
            time.sleep(POLL_S)
        assert holders(client, name)[0].token == lock.token
        assert not lock.lost.is_set()
    assert holders(client, name) == []
    assert lock.token == 0
