"""A worker helper: register, heartbeat, take assignments, run them, report.

    def create_director(op, aborted):
        ...                                  # do the work; watch `aborted` if it is long
        return {"dashboard": "https://..."}  # becomes the target's status.response

    with client.worker("bosh@10.0.2.2", ["Director:create"], create_director):
        ...                                  # runs in background threads until the block ends

Each report carries the (attempt, epoch) of its assignment; a report refused with
STALE_ASSIGNMENT means another worker took the operation over: the work is dropped, never
retried. The assignment stream starts with the worker's current assignments, so a stream opened
again after a break repeats some: each (operation, epoch) runs once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc

from steward import errors
from steward.v1 import steward_pb2 as pb

if TYPE_CHECKING:
    from steward.client import Client

log = logging.getLogger(__name__)

#: The worker heartbeats this many times per TTL.
HEARTBEATS_PER_TTL = 3
#: Pause before opening the assignment stream again after it broke.
STREAM_RETRY_PAUSE_S = 0.2

#: handler(operation, aborted) -> response object (or None). Raising fails the operation.
Handler = Callable[[pb.OperationInfo, threading.Event], dict | None]


class Worker:
    """Runs ``handler`` for each operation assigned to ``worker_id``."""

    def __init__(
        self,
        client: Client,
        worker_id: str,
        handles: Sequence[str],
        handler: Handler,
        *,
        capacity: int = 1,
        ttl: float = 10.0,
        deregister_on_stop: bool = True,
    ) -> None:
        self._client = client
        self.id = worker_id
        self.handles = list(handles)
        self.handler = handler
        self.capacity = capacity
        self.ttl = ttl
        self.deregister_on_stop = deregister_on_stop
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pool: ThreadPoolExecutor | None = None
        self._stream: Any = None
        self._mutex = threading.Lock()
        self._started: set[tuple[str, int]] = set()  # (operation id, epoch) run or running
        self._aborted: dict[str, threading.Event] = {}  # operation id -> abort asked

    def start(self) -> Worker:
        """Registers and starts the heartbeat and assignment threads."""
        self._register()
        self._pool = ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix=f"steward-{self.id}")
        for target in (self._heartbeat_loop, self._assignment_loop):
            thread = threading.Thread(target=target, name=f"steward-worker-{self.id}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stops taking assignments, waits for running ones, and deregisters."""
        self._stop.set()
        with self._mutex:
            if self._stream is not None:
                self._stream.cancel()
        for thread in self._threads:
            thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self.deregister_on_stop:
            self._client.call("Workers", "Deregister", pb.DeregisterWorkerRequest(worker=self.id), write=True)

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def report(
        self, op: pb.OperationInfo, kind: str, *, response: dict | None = None, error: str = ""
    ) -> pb.OperationInfo:
        """Reports ``kind`` (STARTED, SUCCEEDED, FAILED, ABORTED) for the assignment ``op``.
        Raises StaleAssignment when the assignment was lost."""
        req = pb.ReportRequest(
            id=op.id,
            worker=self.id,
            attempt=op.attempt,
            epoch=op.epoch,
            kind=pb.ReportKind.Value(f"REPORT_KIND_{kind}"),
            response_json=json.dumps(response) if response is not None else "",
            error=error,
        )
        try:
            return self._client.call("Workers", "Report", req, write=True)
        except (errors.OutcomeUnknown, errors.Unavailable, errors.DeadlineExceeded):
            # Outcome unknown. Read back: the report took effect if the operation moved on
            # under this epoch; else it is sent once more (the epoch keeps a late one harmless).
            current = self._client.get_operation(op.id)
            if current.epoch != op.epoch:
                raise errors.StaleAssignment(
                    f"operation {op.id} moved to epoch {current.epoch}", reason="STALE_ASSIGNMENT"
                ) from None
            if current.state != op.state:
                return current
            return self._client.call("Workers", "Report", req, write=True)

    def _register(self) -> None:
        req = pb.RegisterWorkerRequest(
            worker=self.id, handles=self.handles, capacity=self.capacity, ttl_ms=int(self.ttl * 1000)
        )
        self._client.call("Workers", "Register", req, write=True)

    def _register_quietly(self) -> None:
        try:
            self._register()
        except errors.StewardError as err:
            log.warning("worker %s: registering failed: %s", self.id, err)

    def _heartbeat_loop(self) -> None:
        interval = self.ttl / HEARTBEATS_PER_TTL
        while not self._stop.wait(interval):
            try:
                self._client.call("Workers", "Heartbeat", pb.HeartbeatRequest(worker=self.id), write=True)
            except errors.NotFound:
                self._register_quietly()
            except errors.StewardError as err:
                log.warning("worker %s: heartbeat failed: %s", self.id, err)

    def _assignment_loop(self) -> None:
        while not self._stop.is_set():
            stream = self._client.stub("Workers").Assignments(
                pb.AssignmentsRequest(worker=self.id), metadata=self._client._metadata
            )
            with self._mutex:
                self._stream = stream
            if self._stop.is_set():
                stream.cancel()
                return
            try:
                for assignment in stream:
                    self._dispatch(assignment)
            except grpc.RpcError as rpc_error:
                if self._stop.is_set():
                    return
                err = errors.from_rpc_error(rpc_error)
                if isinstance(err, errors.NotFound):
                    # Declared dead (a heartbeat gap): its assignments went to others. Register
                    # again; what it still runs is refused as a stale assignment.
                    log.warning("worker %s: no longer registered; registering again", self.id)
                    self._register_quietly()
                else:
                    log.info("worker %s: assignment stream broke (%s); opening it again", self.id, err)
                    self._client._move_on(self._client.endpoints[0], None)
            self._stop.wait(STREAM_RETRY_PAUSE_S)

    def _dispatch(self, assignment: pb.Assignment) -> None:
        op = assignment.operation
        if assignment.kind == pb.ASSIGNMENT_KIND_ABORT:
            with self._mutex:
                running = self._aborted.get(op.id)
            if running is not None:
                running.set()  # the run reports ABORTED when its handler returns
            else:
                self._report_quietly(op, "ABORTED")
            return
        with self._mutex:
            if (op.id, op.epoch) in self._started:
                return
            self._started.add((op.id, op.epoch))
            self._aborted[op.id] = threading.Event()
        if self._pool is not None:
            self._pool.submit(self._run, op)

    def _run(self, op: pb.OperationInfo) -> None:
        with self._mutex:
            aborted = self._aborted[op.id]
        try:
            if op.state != pb.OPERATION_STATE_IN_PROGRESS:
                op = self.report(op, "STARTED")
            try:
                response = self.handler(op, aborted)
            except Exception as exc:  # the handler's failure fails the operation, named
                log.warning("worker %s: %s failed: %s", self.id, op.id, exc)
                self._report_quietly(op, "FAILED", error=f"{type(exc).__name__}: {exc}")
                return
            if aborted.is_set():
                self._report_quietly(op, "ABORTED")
            else:
                self._report_quietly(op, "SUCCEEDED", response=response)
        except errors.StaleAssignment:
            log.info("worker %s: %s was taken over; dropping it", self.id, op.id)
        except errors.StewardError as err:
            log.warning("worker %s: %s: %s", self.id, op.id, err)
        finally:
            with self._mutex:
                self._aborted.pop(op.id, None)

    def _report_quietly(self, op: pb.OperationInfo, kind: str, **kwargs: Any) -> None:
        try:
            self.report(op, kind, **kwargs)
        except errors.StaleAssignment:
            log.info("worker %s: %s was taken over; its %s report was refused", self.id, op.id, kind)
        except errors.StewardError as err:
            log.warning("worker %s: reporting %s for %s failed: %s", self.id, kind, op.id, err)
