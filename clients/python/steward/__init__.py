"""Python client of steward, a Raft-replicated coordinator for control planes.

    from steward import Client, Conflict

    with Client(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"], timeout=10) as c:
        obj = c.create({"apiVersion": "v1", "kind": "Director", "metadata": {"name": "d1"},
                        "spec": {"replicas": 3}})

The generated stubs are ``steward.v1.steward_pb2`` / ``steward_pb2_grpc`` (``errors_pb2`` holds
the ``ErrorReason`` enum); ``steward.client`` is the retrying layer over them, ``steward.errors``
the typed refusals.
"""

from steward.client import Client
from steward.errors import (
    AlreadyExists,
    AuthChanged,
    Conflict,
    DeadlineExceeded,
    FenceRejected,
    Internal,
    InvalidArgument,
    LimitExceeded,
    LockBusy,
    LockDelayed,
    LockNotHeld,
    LockWaitExpired,
    NotApplied,
    NotFound,
    OutcomeUnknown,
    Overloaded,
    PermissionDenied,
    PoolEmpty,
    PoolWaitExpired,
    RevisionCompacted,
    StaleAssignment,
    StewardError,
    Unauthenticated,
    Unavailable,
    continue_expired,
)
from steward.locks import Lock
from steward.watch import Watch, WatchEvent
from steward.workers import Worker

__all__ = [
    "AlreadyExists",
    "AuthChanged",
    "Client",
    "Conflict",
    "DeadlineExceeded",
    "FenceRejected",
    "Internal",
    "InvalidArgument",
    "LimitExceeded",
    "Lock",
    "LockBusy",
    "LockDelayed",
    "LockNotHeld",
    "LockWaitExpired",
    "NotApplied",
    "NotFound",
    "OutcomeUnknown",
    "Overloaded",
    "PermissionDenied",
    "PoolEmpty",
    "PoolWaitExpired",
    "RevisionCompacted",
    "StaleAssignment",
    "StewardError",
    "Unauthenticated",
    "Unavailable",
    "Watch",
    "WatchEvent",
    "Worker",
    "continue_expired",
]
