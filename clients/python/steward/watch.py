"""A watch that survives broken streams: :meth:`steward.Client.watch` returns it.

A stream cut off by a node that dies, restarts or shuts down is opened again on the next
endpoint from where it stopped. Events of one revision (one txn) may straddle the break, so the
last revision delivered is resumed inclusively and the events already delivered at it are
skipped; after a BOOKMARK (every event up to its revision was sent) it resumes right after it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from steward import errors
from steward.v1 import steward_pb2 as pb

if TYPE_CHECKING:
    from steward.client import Client

#: Pause before opening a stream again after a failed open, doubling up to the maximum.
RESUME_PAUSE_FIRST_S = 0.05
RESUME_PAUSE_MAX_S = 0.5


@dataclass(frozen=True)
class WatchEvent:
    """One change. ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK (``object`` None)."""

    type: str
    revision: int
    object: dict | None

    @property
    def key(self) -> tuple[str, str, str]:
        """``(kind, namespace, name)`` of the object; empty for a BOOKMARK."""
        meta = (self.object or {}).get("metadata", {})
        return ((self.object or {}).get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


class Watch:
    """An iterator of :class:`WatchEvent` in revision order; ``close()`` ends it (from any
    thread). ``resumes`` counts the streams opened again after a break."""

    def __init__(
        self,
        client: Client,
        kind: str,
        namespace: str,
        selector: str,
        start_revision: int,
        bookmarks: bool,
    ) -> None:
        self._client = client
        self._request = pb.WatchRequest(kind=kind, namespace=namespace, label_selector=selector)
        # "From now on" made concrete, so that a resume before the first event knows where
        # "now" was.
        self._from = start_revision or client.revision(kind) + 1
        self._bookmarks = bookmarks
        self._stream: Any = None
        self._closed = threading.Event()
        self._revision = 0  # last revision delivered
        self._seen_at_revision: set[tuple[str, tuple[str, str, str]]] = set()
        self._complete_through = 0  # every event up to here was delivered (bookmark)
        self.resumes = 0
        #: The endpoint the current stream was opened on.
        self.endpoint: str | None = None

    def __iter__(self) -> Watch:
        return self

    def __next__(self) -> WatchEvent:
        failing_since: float | None = None
        pause = RESUME_PAUSE_FIRST_S
        while True:
            if self._closed.is_set():
                raise StopIteration
            if self._stream is None:
                self._open()
            try:
                message = next(self._stream)
            except StopIteration:  # the server ended the stream (shutting down): resume
                err: errors.StewardError | None = None
            except grpc.RpcError as rpc_error:
                if self._closed.is_set():
                    raise StopIteration from None
                err = errors.from_rpc_error(rpc_error)
                resumable = (
                    err.not_applied
                    or err.code == grpc.StatusCode.UNAVAILABLE
                    or err.reason == "WATCH_TOO_SLOW"
                )
                if not resumable:
                    raise err from None
            else:
                failing_since, pause = None, RESUME_PAUSE_FIRST_S
                event = _event(message)
                if self._admit(event) and (event.type != "BOOKMARK" or self._bookmarks):
                    return event
                continue
            # Broken: open again elsewhere, giving up once opens have failed for a whole
            # client timeout.
            now = time.monotonic()
            failing_since = failing_since or now
            if err is not None and now - failing_since > self._client.timeout:
                raise err
            self._client._move_on(self.endpoint or "", None)
            self._stream = None
            self.resumes += 1
            if self._closed.wait(pause):
                raise StopIteration
            pause = min(pause * 2, RESUME_PAUSE_MAX_S)

    def close(self) -> None:
        """Ends the watch; a ``next()`` blocked in another thread stops."""
        self._closed.set()
        if self._stream is not None:
            self._stream.cancel()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> None:
        request = pb.WatchRequest()
        request.CopyFrom(self._request)
        request.start_revision = self._resume_from()
        self.endpoint = self._client.endpoints[0]
        stub = self._client.stub("Resources", self.endpoint)
        self._stream = stub.Watch(request, metadata=self._client._metadata)

    def _resume_from(self) -> int:
        if self._complete_through > 0 and self._complete_through >= self._revision:
            return self._complete_through + 1
        return self._revision or self._from

    def _admit(self, event: WatchEvent) -> bool:
        """Records ``event``; False if it was delivered before a resume."""
        if event.type == "BOOKMARK":
            self._complete_through = max(self._complete_through, event.revision)
            return True
        if event.revision <= self._complete_through or event.revision < self._revision:
            return False
        if event.revision > self._revision:
            self._revision = event.revision
            self._seen_at_revision.clear()
        seen = (event.type, event.key)
        if seen in self._seen_at_revision:
            return False
        self._seen_at_revision.add(seen)
        return True


def _event(message: Any) -> WatchEvent:
    try:
        name = pb.EventType.Name(message.type).removeprefix("EVENT_TYPE_")
    except ValueError:  # a value newer than these stubs
        name = str(message.type)
    obj = json.loads(message.object_json) if message.object_json else None
    return WatchEvent(type=name, revision=int(message.revision), object=obj)
