from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_APPLIED: _ClassVar[ErrorReason]
    ERROR_REASON_OUTCOME_UNKNOWN: _ClassVar[ErrorReason]
    ERROR_REASON_ALREADY_EXISTS: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_REVISION_CONFLICT: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_ARGUMENT: _ClassVar[ErrorReason]
    ERROR_REASON_LIMIT_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_OVERLOADED: _ClassVar[ErrorReason]
    ERROR_REASON_RATE_LIMITED: _ClassVar[ErrorReason]
    ERROR_REASON_NO_SPACE: _ClassVar[ErrorReason]
    ERROR_REASON_LOCK_BUSY: _ClassVar[ErrorReason]
    ERROR_REASON_LOCK_DELAYED: _ClassVar[ErrorReason]
    ERROR_REASON_LOCK_WAIT_EXPIRED: _ClassVar[ErrorReason]
    ERROR_REASON_LOCK_NOT_HELD: _ClassVar[ErrorReason]
    ERROR_REASON_FENCE_REJECTED: _ClassVar[ErrorReason]
    ERROR_REASON_STALE_ASSIGNMENT: _ClassVar[ErrorReason]
    ERROR_REASON_AUTH_CHANGED: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHENTICATED: _ClassVar[ErrorReason]
    ERROR_REASON_PERMISSION_DENIED: _ClassVar[ErrorReason]
    ERROR_REASON_OPERATION_STATE: _ClassVar[ErrorReason]
    ERROR_REASON_WORKER_UNFIT: _ClassVar[ErrorReason]
    ERROR_REASON_POOL_EMPTY: _ClassVar[ErrorReason]
    ERROR_REASON_POOL_NOT_OWNER: _ClassVar[ErrorReason]
    ERROR_REASON_INTERNAL: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_NOT_APPLIED: ErrorReason
ERROR_REASON_OUTCOME_UNKNOWN: ErrorReason
ERROR_REASON_ALREADY_EXISTS: ErrorReason
ERROR_REASON_NOT_FOUND: ErrorReason
ERROR_REASON_REVISION_CONFLICT: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_LIMIT_EXCEEDED: ErrorReason
ERROR_REASON_OVERLOADED: ErrorReason
ERROR_REASON_RATE_LIMITED: ErrorReason
ERROR_REASON_NO_SPACE: ErrorReason
ERROR_REASON_LOCK_BUSY: ErrorReason
ERROR_REASON_LOCK_DELAYED: ErrorReason
ERROR_REASON_LOCK_WAIT_EXPIRED: ErrorReason
ERROR_REASON_LOCK_NOT_HELD: ErrorReason
ERROR_REASON_FENCE_REJECTED: ErrorReason
ERROR_REASON_STALE_ASSIGNMENT: ErrorReason
ERROR_REASON_AUTH_CHANGED: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_PERMISSION_DENIED: ErrorReason
ERROR_REASON_OPERATION_STATE: ErrorReason
ERROR_REASON_WORKER_UNFIT: ErrorReason
ERROR_REASON_POOL_EMPTY: ErrorReason
ERROR_REASON_POOL_NOT_OWNER: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
