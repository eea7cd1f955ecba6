"""A lock helper: acquire with a TTL, refresh in the background, release on exit.

    with client.lock("backup/d1", ttl=10) as lock:
        client.update(obj, fence=lock)      # refused (FenceRejected) once the lock is lost

The fencing token is what makes a lock safe: a holder that stalls past its TTL may still believe
it holds the lock, but every write it fences with the old token is refused by the store. The
refresher only keeps a live holder's TTL from running out; ``lost`` is set when a refresh is
refused, and writes should stop then.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING

from steward import errors
from steward.v1 import steward_pb2 as pb

if TYPE_CHECKING:
    from steward.client import Client

#: The refresher renews the TTL this many times per TTL.
REFRESHES_PER_TTL = 3


def default_holder() -> str:
    """``host-pid-random``: unique per Lock, readable in ``steward lock list``."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Lock:
    """A READ or WRITE lock on ``name`` held by ``holder``.

    Args:
        ttl: seconds the grant lives without a refresh (the refresher renews it).
        mode: ``"WRITE"`` or ``"READ"``.
        wait: seconds to wait in the lock's queue (0: LockBusy at once if held).
        details: a JSON object stored with the grant.
        refresh: whether a background thread renews the TTL while held.
    """

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        holder: str | None = None,
        ttl: float = 10.0,
        mode: str = "WRITE",
        wait: float = 0.0,
        details: dict | None = None,
        refresh: bool = True,
    ) -> None:
        if ttl <= 0:
            raise ValueError("ttl: must be > 0 seconds (a lock without a TTL outlives its holder)")
        self._client = client
        self.name = name
        self.holder = holder or default_holder()
        self.ttl = ttl
        self.mode = pb.LockMode.Value(f"LOCK_MODE_{mode.upper()}")
        self.wait = wait
        self.details = details
        self.refresh_enabled = refresh
        #: The fencing token of the grant; 0 while not held.
        self.token = 0
        #: Set when a refresh was refused: the grant is gone (expired, or taken over).
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None

    def acquire(self) -> Lock:
        """Takes the lock; raises LockBusy, LockDelayed or LockWaitExpired when not granted."""
        req = pb.AcquireRequest(
            name=self.name,
            mode=self.mode,
            holder=self.holder,
            ttl_ms=int(self.ttl * 1000),
            details_json=json.dumps(self.details) if self.details is not None else "",
            wait_ms=int(self.wait * 1000),
        )
        grant = self._client.call(
            "Locks", "Acquire", req, write=True, timeout=self._client.timeout + self.wait
        )
        self.token = int(grant.holder.token)
        self.lost.clear()
        self._stop.clear()
        if self.refresh_enabled:
            self._refresher = threading.Thread(
                target=self._refresh_loop, name=f"steward-lock-{self.name}", daemon=True
            )
            self._refresher.start()
        return self

    def refresh(self) -> None:
        """Renews the TTL now; raises LockNotHeld if the grant is gone."""
        req = pb.RefreshRequest(
            name=self.name, holder=self.holder, token=self.token, ttl_ms=int(self.ttl * 1000)
        )
        self._client.call("Locks", "Refresh", req, write=True)

    def release(self) -> None:
        """Stops the refresher and releases the grant (a grant already gone is not an error)."""
        self._stop.set()
        if self._refresher is not None and self._refresher is not threading.current_thread():
            self._refresher.join()
        self._refresher = None
        if not self.token:
            return
        req = pb.ReleaseRequest(name=self.name, holder=self.holder, token=self.token)
        try:
            self._client.call("Locks", "Release", req, write=True)
        except (errors.LockNotHeld, errors.NotFound):
            pass
        finally:
            self.token = 0

    def _refresh_loop(self) -> None:
        interval = self.ttl / REFRESHES_PER_TTL
        while not self._stop.wait(interval):
            try:
                self.refresh()
            except (errors.LockNotHeld, errors.FenceRejected, errors.NotFound):
                self.lost.set()
                return
            except errors.StewardError:
                continue  # no node answered in time: try again; the TTL has room for it

    def __enter__(self) -> Lock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
