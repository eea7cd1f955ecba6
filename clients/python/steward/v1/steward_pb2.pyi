from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Consistency(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSISTENCY_UNSPECIFIED: _ClassVar[Consistency]
    CONSISTENCY_LINEARIZABLE: _ClassVar[Consistency]
    CONSISTENCY_SERIALIZABLE: _ClassVar[Consistency]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_ADDED: _ClassVar[EventType]
    EVENT_TYPE_MODIFIED: _ClassVar[EventType]
    EVENT_TYPE_DELETED: _ClassVar[EventType]
    EVENT_TYPE_BOOKMARK: _ClassVar[EventType]

class LockMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOCK_MODE_UNSPECIFIED: _ClassVar[LockMode]
    LOCK_MODE_READ: _ClassVar[LockMode]
    LOCK_MODE_WRITE: _ClassVar[LockMode]

class LockEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOCK_EVENT_TYPE_UNSPECIFIED: _ClassVar[LockEventType]
    LOCK_EVENT_TYPE_GRANTED: _ClassVar[LockEventType]
    LOCK_EVENT_TYPE_RELEASED: _ClassVar[LockEventType]
    LOCK_EVENT_TYPE_EXPIRED: _ClassVar[LockEventType]
    LOCK_EVENT_TYPE_WAIT_CANCELLED: _ClassVar[LockEventType]
    LOCK_EVENT_TYPE_WAIT_EXPIRED: _ClassVar[LockEventType]

class OperationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_STATE_UNSPECIFIED: _ClassVar[OperationState]
    OPERATION_STATE_QUEUED: _ClassVar[OperationState]
    OPERATION_STATE_DISPATCHED: _ClassVar[OperationState]
    OPERATION_STATE_IN_PROGRESS: _ClassVar[OperationState]
    OPERATION_STATE_ABORTING: _ClassVar[OperationState]
    OPERATION_STATE_SUCCEEDED: _ClassVar[OperationState]
    OPERATION_STATE_FAILED: _ClassVar[OperationState]
    OPERATION_STATE_ABORTED: _ClassVar[OperationState]

class ReportKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORT_KIND_UNSPECIFIED: _ClassVar[ReportKind]
    REPORT_KIND_STARTED: _ClassVar[ReportKind]
    REPORT_KIND_SUCCEEDED: _ClassVar[ReportKind]
    REPORT_KIND_FAILED: _ClassVar[ReportKind]
    REPORT_KIND_ABORTED: _ClassVar[ReportKind]

class AssignmentKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ASSIGNMENT_KIND_UNSPECIFIED: _ClassVar[AssignmentKind]
    ASSIGNMENT_KIND_RUN: _ClassVar[AssignmentKind]
    ASSIGNMENT_KIND_ABORT: _ClassVar[AssignmentKind]

class DeploymentVerb(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPLOYMENT_VERB_UNSPECIFIED: _ClassVar[DeploymentVerb]
    DEPLOYMENT_VERB_APPROVE: _ClassVar[DeploymentVerb]
    DEPLOYMENT_VERB_INSTANTIATE: _ClassVar[DeploymentVerb]
    DEPLOYMENT_VERB_TERMINATE: _ClassVar[DeploymentVerb]
    DEPLOYMENT_VERB_DELETE: _ClassVar[DeploymentVerb]
CONSISTENCY_UNSPECIFIED: Consistency
CONSISTENCY_LINEARIZABLE: Consistency
CONSISTENCY_SERIALIZABLE: Consistency
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_ADDED: EventType
EVENT_TYPE_MODIFIED: EventType
EVENT_TYPE_DELETED: EventType
EVENT_TYPE_BOOKMARK: EventType
LOCK_MODE_UNSPECIFIED: LockMode
LOCK_MODE_READ: LockMode
LOCK_MODE_WRITE: LockMode
LOCK_EVENT_TYPE_UNSPECIFIED: LockEventType
LOCK_EVENT_TYPE_GRANTED: LockEventType
LOCK_EVENT_TYPE_RELEASED: LockEventType
LOCK_EVENT_TYPE_EXPIRED: LockEventType
LOCK_EVENT_TYPE_WAIT_CANCELLED: LockEventType
LOCK_EVENT_TYPE_WAIT_EXPIRED: LockEventType
OPERATION_STATE_UNSPECIFIED: OperationState
OPERATION_STATE_QUEUED: OperationState
OPERATION_STATE_DISPATCHED: OperationState
OPERATION_STATE_IN_PROGRESS: OperationState
OPERATION_STATE_ABORTING: OperationState
OPERATION_STATE_SUCCEEDED: OperationState
OPERATION_STATE_FAILED: OperationState
OPERATION_STATE_ABORTED: OperationState
REPORT_KIND_UNSPECIFIED: ReportKind
REPORT_KIND_STARTED: ReportKind
REPORT_KIND_SUCCEEDED: ReportKind
REPORT_KIND_FAILED: ReportKind
REPORT_KIND_ABORTED: ReportKind
ASSIGNMENT_KIND_UNSPECIFIED: AssignmentKind
ASSIGNMENT_KIND_RUN: AssignmentKind
ASSIGNMENT_KIND_ABORT: AssignmentKind
DEPLOYMENT_VERB_UNSPECIFIED: DeploymentVerb
DEPLOYMENT_VERB_APPROVE: DeploymentVerb
DEPLOYMENT_VERB_INSTANTIATE: DeploymentVerb
DEPLOYMENT_VERB_TERMINATE: DeploymentVerb
DEPLOYMENT_VERB_DELETE: DeploymentVerb

class SnapshotRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("header_json", "data", "sha256", "total_bytes")
    HEADER_JSON_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    header_json: str
    data: bytes
    sha256: str
    total_bytes: int
    def __init__(self, header_json: _Optional[str] = ..., data: _Optional[bytes] = ..., sha256: _Optional[str] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class ReservationCountersRequest(_message.Message):
    __slots__ = ("node_id", "consistency")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    consistency: Consistency
    def __init__(self, node_id: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ReservedUnits(_message.Message):
    __slots__ = ("cru", "mru", "hru", "sru")
    CRU_FIELD_NUMBER: _ClassVar[int]
    MRU_FIELD_NUMBER: _ClassVar[int]
    HRU_FIELD_NUMBER: _ClassVar[int]
    SRU_FIELD_NUMBER: _ClassVar[int]
    cru: int
    mru: int
    hru: int
    sru: int
    def __init__(self, cru: _Optional[int] = ..., mru: _Optional[int] = ..., hru: _Optional[int] = ..., sru: _Optional[int] = ...) -> None: ...

class NodeReservations(_message.Message):
    __slots__ = ("node_id", "workloads", "workloads_by_kind", "units")
    class WorkloadsByKindEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_BY_KIND_FIELD_NUMBER: _ClassVar[int]
    UNITS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    workloads: int
    workloads_by_kind: _containers.ScalarMap[str, int]
    units: ReservedUnits
    def __init__(self, node_id: _Optional[str] = ..., workloads: _Optional[int] = ..., workloads_by_kind: _Optional[_Mapping[str, int]] = ..., units: _Optional[_Union[ReservedUnits, _Mapping]] = ...) -> None: ...

class ReservationCountersReply(_message.Message):
    __slots__ = ("nodes", "total", "pending_decommission", "revision")
    NODES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PENDING_DECOMMISSION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeReservations]
    total: NodeReservations
    pending_decommission: int
    revision: int
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeReservations, _Mapping]]] = ..., total: _Optional[_Union[NodeReservations, _Mapping]] = ..., pending_decommission: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class Fence(_message.Message):
    __slots__ = ("lock", "token")
    LOCK_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    lock: str
    token: int
    def __init__(self, lock: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class CreateRequest(_message.Message):
    __slots__ = ("object_json", "fence")
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    object_json: str
    fence: Fence
    def __init__(self, object_json: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class UpdateRequest(_message.Message):
    __slots__ = ("object_json", "expected_revision", "fence")
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    object_json: str
    expected_revision: int
    fence: Fence
    def __init__(self, object_json: _Optional[str] = ..., expected_revision: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("kind", "namespace", "name", "consistency")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    namespace: str
    name: str
    consistency: Consistency
    def __init__(self, kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("kind", "namespace", "name", "expected_revision", "fence")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    namespace: str
    name: str
    expected_revision: int
    fence: Fence
    def __init__(self, kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., expected_revision: _Optional[int] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class ObjectReply(_message.Message):
    __slots__ = ("object_json", "revision")
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    object_json: str
    revision: int
    def __init__(self, object_json: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("kind", "namespace", "label_selector", "limit", "continue_token", "consistency")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    namespace: str
    label_selector: str
    limit: int
    continue_token: str
    consistency: Consistency
    def __init__(self, kind: _Optional[str] = ..., namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., limit: _Optional[int] = ..., continue_token: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class CountRequest(_message.Message):
    __slots__ = ("kind", "namespace", "label_selector", "by", "consistency")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    namespace: str
    label_selector: str
    by: str
    consistency: Consistency
    def __init__(self, kind: _Optional[str] = ..., namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., by: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class CountBucket(_message.Message):
    __slots__ = ("value", "count")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    value: str
    count: int
    def __init__(self, value: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class CountReply(_message.Message):
    __slots__ = ("buckets", "missing", "total", "revision")
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedCompositeFieldContainer[CountBucket]
    missing: int
    total: int
    revision: int
    def __init__(self, buckets: _Optional[_Iterable[_Union[CountBucket, _Mapping]]] = ..., missing: _Optional[int] = ..., total: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class ListReply(_message.Message):
    __slots__ = ("objects_json", "revision", "continue_token")
    OBJECTS_JSON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    objects_json: _containers.RepeatedScalarFieldContainer[str]
    revision: int
    continue_token: str
    def __init__(self, objects_json: _Optional[_Iterable[str]] = ..., revision: _Optional[int] = ..., continue_token: _Optional[str] = ...) -> None: ...

class TxnOp(_message.Message):
    __slots__ = ("create", "update", "update_status", "delete")
    CREATE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_STATUS_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    create: CreateRequest
    update: UpdateRequest
    update_status: UpdateRequest
    delete: DeleteRequest
    def __init__(self, create: _Optional[_Union[CreateRequest, _Mapping]] = ..., update: _Optional[_Union[UpdateRequest, _Mapping]] = ..., update_status: _Optional[_Union[UpdateRequest, _Mapping]] = ..., delete: _Optional[_Union[DeleteRequest, _Mapping]] = ...) -> None: ...

class TxnRequest(_message.Message):
    __slots__ = ("ops", "fence")
    OPS_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[TxnOp]
    fence: Fence
    def __init__(self, ops: _Optional[_Iterable[_Union[TxnOp, _Mapping]]] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class TxnReply(_message.Message):
    __slots__ = ("objects_json", "revision")
    OBJECTS_JSON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    objects_json: _containers.RepeatedScalarFieldContainer[str]
    revision: int
    def __init__(self, objects_json: _Optional[_Iterable[str]] = ..., revision: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("kind", "namespace", "label_selector", "start_revision", "bookmark_interval_ms")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    START_REVISION_FIELD_NUMBER: _ClassVar[int]
    BOOKMARK_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    namespace: str
    label_selector: str
    start_revision: int
    bookmark_interval_ms: int
    def __init__(self, kind: _Optional[str] = ..., namespace: _Optional[str] = ..., label_selector: _Optional[str] = ..., start_revision: _Optional[int] = ..., bookmark_interval_ms: _Optional[int] = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ("type", "revision", "object_json")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    type: EventType
    revision: int
    object_json: str
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., revision: _Optional[int] = ..., object_json: _Optional[str] = ...) -> None: ...

class ClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("id", "peer_addr", "client_addr", "state", "term", "leader_id", "last_log_index", "committed_index", "applied_index", "snapshot_index", "purged_index", "revision", "error", "serving", "disk_total_bytes", "disk_free_bytes", "voter", "data_bytes", "quota_bytes", "pid", "wall_ms", "cluster_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    PURGED_INDEX_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    DISK_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    DATA_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    WALL_MS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_MS_FIELD_NUMBER: _ClassVar[int]
    id: int
    peer_addr: str
    client_addr: str
    state: str
    term: int
    leader_id: int
    last_log_index: int
    committed_index: int
    applied_index: int
    snapshot_index: int
    purged_index: int
    revision: int
    error: str
    serving: bool
    disk_total_bytes: int
    disk_free_bytes: int
    voter: bool
    data_bytes: int
    quota_bytes: int
    pid: int
    wall_ms: int
    cluster_ms: int
    def __init__(self, id: _Optional[int] = ..., peer_addr: _Optional[str] = ..., client_addr: _Optional[str] = ..., state: _Optional[str] = ..., term: _Optional[int] = ..., leader_id: _Optional[int] = ..., last_log_index: _Optional[int] = ..., committed_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., snapshot_index: _Optional[int] = ..., purged_index: _Optional[int] = ..., revision: _Optional[int] = ..., error: _Optional[str] = ..., serving: _Optional[bool] = ..., disk_total_bytes: _Optional[int] = ..., disk_free_bytes: _Optional[int] = ..., voter: _Optional[bool] = ..., data_bytes: _Optional[int] = ..., quota_bytes: _Optional[int] = ..., pid: _Optional[int] = ..., wall_ms: _Optional[int] = ..., cluster_ms: _Optional[int] = ...) -> None: ...

class ClusterStatusReply(_message.Message):
    __slots__ = ("nodes", "leader_id", "warnings", "alarms")
    NODES_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    ALARMS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    leader_id: int
    warnings: _containers.RepeatedScalarFieldContainer[str]
    alarms: _containers.RepeatedCompositeFieldContainer[Alarm]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., leader_id: _Optional[int] = ..., warnings: _Optional[_Iterable[str]] = ..., alarms: _Optional[_Iterable[_Union[Alarm, _Mapping]]] = ...) -> None: ...

class Alarm(_message.Message):
    __slots__ = ("node_id", "kind", "raised_ms", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RAISED_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    kind: str
    raised_ms: int
    reason: str
    def __init__(self, node_id: _Optional[int] = ..., kind: _Optional[str] = ..., raised_ms: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class AlarmListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AlarmDisarmRequest(_message.Message):
    __slots__ = ("node_id", "kind")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    kind: str
    def __init__(self, node_id: _Optional[int] = ..., kind: _Optional[str] = ...) -> None: ...

class AlarmsReply(_message.Message):
    __slots__ = ("alarms",)
    ALARMS_FIELD_NUMBER: _ClassVar[int]
    alarms: _containers.RepeatedCompositeFieldContainer[Alarm]
    def __init__(self, alarms: _Optional[_Iterable[_Union[Alarm, _Mapping]]] = ...) -> None: ...

class CompactRequest(_message.Message):
    __slots__ = ("node_ids",)
    NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    node_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class NodeCompaction(_message.Message):
    __slots__ = ("node_id", "snapshot_index", "purged_index", "data_bytes_before", "data_bytes_after", "duration_ms", "error")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_INDEX_FIELD_NUMBER: _ClassVar[int]
    PURGED_INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_BYTES_BEFORE_FIELD_NUMBER: _ClassVar[int]
    DATA_BYTES_AFTER_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    snapshot_index: int
    purged_index: int
    data_bytes_before: int
    data_bytes_after: int
    duration_ms: int
    error: str
    def __init__(self, node_id: _Optional[int] = ..., snapshot_index: _Optional[int] = ..., purged_index: _Optional[int] = ..., data_bytes_before: _Optional[int] = ..., data_bytes_after: _Optional[int] = ..., duration_ms: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class CompactReply(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeCompaction]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeCompaction, _Mapping]]] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ("id", "peer_addr", "client_addr", "voter", "leader", "term", "matched_index", "applied_index", "lag", "reachable")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    VOTER_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    MATCHED_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    id: int
    peer_addr: str
    client_addr: str
    voter: bool
    leader: bool
    term: int
    matched_index: int
    applied_index: int
    lag: int
    reachable: bool
    def __init__(self, id: _Optional[int] = ..., peer_addr: _Optional[str] = ..., client_addr: _Optional[str] = ..., voter: _Optional[bool] = ..., leader: _Optional[bool] = ..., term: _Optional[int] = ..., matched_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., lag: _Optional[int] = ..., reachable: _Optional[bool] = ...) -> None: ...

class MemberListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class MemberListReply(_message.Message):
    __slots__ = ("members", "leader_id", "term", "last_log_index")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[Member]
    leader_id: int
    term: int
    last_log_index: int
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., leader_id: _Optional[int] = ..., term: _Optional[int] = ..., last_log_index: _Optional[int] = ...) -> None: ...

class AddLearnerRequest(_message.Message):
    __slots__ = ("id", "peer_addr", "client_addr")
    ID_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDR_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ADDR_FIELD_NUMBER: _ClassVar[int]
    id: int
    peer_addr: str
    client_addr: str
    def __init__(self, id: _Optional[int] = ..., peer_addr: _Optional[str] = ..., client_addr: _Optional[str] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class RemoveMemberRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class TransferLeaderRequest(_message.Message):
    __slots__ = ("to",)
    TO_FIELD_NUMBER: _ClassVar[int]
    to: int
    def __init__(self, to: _Optional[int] = ...) -> None: ...

class AcquireRequest(_message.Message):
    __slots__ = ("name", "mode", "holder", "ttl_ms", "details_json", "wait_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    mode: LockMode
    holder: str
    ttl_ms: int
    details_json: str
    wait_ms: int
    def __init__(self, name: _Optional[str] = ..., mode: _Optional[_Union[LockMode, str]] = ..., holder: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., details_json: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class LockHolderInfo(_message.Message):
    __slots__ = ("holder", "mode", "token", "granted_at_ms", "ttl_ms", "expires_at_ms", "details_json")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    GRANTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    holder: str
    mode: LockMode
    token: int
    granted_at_ms: int
    ttl_ms: int
    expires_at_ms: int
    details_json: str
    def __init__(self, holder: _Optional[str] = ..., mode: _Optional[_Union[LockMode, str]] = ..., token: _Optional[int] = ..., granted_at_ms: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., details_json: _Optional[str] = ...) -> None: ...

class LockGrant(_message.Message):
    __slots__ = ("name", "holder")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: LockHolderInfo
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[_Union[LockHolderInfo, _Mapping]] = ...) -> None: ...

class RefreshRequest(_message.Message):
    __slots__ = ("name", "holder", "token", "ttl_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    token: int
    ttl_ms: int
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("name", "holder", "token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    token: int
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class ReleaseReply(_message.Message):
    __slots__ = ("token",)
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: int
    def __init__(self, token: _Optional[int] = ...) -> None: ...

class LockWaiterInfo(_message.Message):
    __slots__ = ("holder", "mode", "wait_id", "queued_at_ms", "wait_until_ms", "details_json")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    WAIT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    holder: str
    mode: LockMode
    wait_id: int
    queued_at_ms: int
    wait_until_ms: int
    details_json: str
    def __init__(self, holder: _Optional[str] = ..., mode: _Optional[_Union[LockMode, str]] = ..., wait_id: _Optional[int] = ..., queued_at_ms: _Optional[int] = ..., wait_until_ms: _Optional[int] = ..., details_json: _Optional[str] = ...) -> None: ...

class LockInfo(_message.Message):
    __slots__ = ("name", "holders", "waiters", "delay_until_ms", "now_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    DELAY_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    holders: _containers.RepeatedCompositeFieldContainer[LockHolderInfo]
    waiters: _containers.RepeatedCompositeFieldContainer[LockWaiterInfo]
    delay_until_ms: int
    now_ms: int
    def __init__(self, name: _Optional[str] = ..., holders: _Optional[_Iterable[_Union[LockHolderInfo, _Mapping]]] = ..., waiters: _Optional[_Iterable[_Union[LockWaiterInfo, _Mapping]]] = ..., delay_until_ms: _Optional[int] = ..., now_ms: _Optional[int] = ...) -> None: ...

class GetLockRequest(_message.Message):
    __slots__ = ("name", "consistency")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    name: str
    consistency: Consistency
    def __init__(self, name: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListLocksRequest(_message.Message):
    __slots__ = ("prefix", "consistency")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    consistency: Consistency
    def __init__(self, prefix: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListLocksReply(_message.Message):
    __slots__ = ("locks", "now_ms")
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    locks: _containers.RepeatedCompositeFieldContainer[LockInfo]
    now_ms: int
    def __init__(self, locks: _Optional[_Iterable[_Union[LockInfo, _Mapping]]] = ..., now_ms: _Optional[int] = ...) -> None: ...

class WatchLocksRequest(_message.Message):
    __slots__ = ("prefix",)
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ...) -> None: ...

class LockEventMessage(_message.Message):
    __slots__ = ("type", "name", "holder", "mode", "token", "wait_id", "time_ms")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WAIT_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    type: LockEventType
    name: str
    holder: str
    mode: LockMode
    token: int
    wait_id: int
    time_ms: int
    def __init__(self, type: _Optional[_Union[LockEventType, str]] = ..., name: _Optional[str] = ..., holder: _Optional[str] = ..., mode: _Optional[_Union[LockMode, str]] = ..., token: _Optional[int] = ..., wait_id: _Optional[int] = ..., time_ms: _Optional[int] = ...) -> None: ...

class OperationPolicy(_message.Message):
    __slots__ = ("lock", "lock_mode", "max_attempts", "deadline_ms", "deletes_target")
    LOCK_FIELD_NUMBER: _ClassVar[int]
    LOCK_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DELETES_TARGET_FIELD_NUMBER: _ClassVar[int]
    lock: str
    lock_mode: LockMode
    max_attempts: int
    deadline_ms: int
    deletes_target: bool
    def __init__(self, lock: _Optional[str] = ..., lock_mode: _Optional[_Union[LockMode, str]] = ..., max_attempts: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., deletes_target: _Optional[bool] = ...) -> None: ...

class OperationTransition(_message.Message):
    __slots__ = ("state", "time_ms", "attempt", "worker")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    state: OperationState
    time_ms: int
    attempt: int
    worker: str
    def __init__(self, state: _Optional[_Union[OperationState, str]] = ..., time_ms: _Optional[int] = ..., attempt: _Optional[int] = ..., worker: _Optional[str] = ...) -> None: ...

class OperationInfo(_message.Message):
    __slots__ = ("id", "idempotency_key", "kind", "namespace", "name", "target_uid", "verb", "params_json", "policy", "state", "attempt", "worker", "epoch", "submitted_ms", "deadline_at_ms", "transitions", "response_json", "error", "fence")
    ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TARGET_UID_FIELD_NUMBER: _ClassVar[int]
    VERB_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_AT_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    idempotency_key: str
    kind: str
    namespace: str
    name: str
    target_uid: str
    verb: str
    params_json: str
    policy: OperationPolicy
    state: OperationState
    attempt: int
    worker: str
    epoch: int
    submitted_ms: int
    deadline_at_ms: int
    transitions: _containers.RepeatedCompositeFieldContainer[OperationTransition]
    response_json: str
    error: str
    fence: Fence
    def __init__(self, id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., target_uid: _Optional[str] = ..., verb: _Optional[str] = ..., params_json: _Optional[str] = ..., policy: _Optional[_Union[OperationPolicy, _Mapping]] = ..., state: _Optional[_Union[OperationState, str]] = ..., attempt: _Optional[int] = ..., worker: _Optional[str] = ..., epoch: _Optional[int] = ..., submitted_ms: _Optional[int] = ..., deadline_at_ms: _Optional[int] = ..., transitions: _Optional[_Iterable[_Union[OperationTransition, _Mapping]]] = ..., response_json: _Optional[str] = ..., error: _Optional[str] = ..., fence: _Optional[_Union[Fence, _Mapping]] = ...) -> None: ...

class SubmitOperationRequest(_message.Message):
    __slots__ = ("kind", "namespace", "name", "verb", "params_json", "idempotency_key", "create_object_json", "max_attempts", "deadline_ms", "lock_kind", "lock_name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERB_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CREATE_OBJECT_JSON_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    LOCK_KIND_FIELD_NUMBER: _ClassVar[int]
    LOCK_NAME_FIELD_NUMBER: _ClassVar[int]
    kind: str
    namespace: str
    name: str
    verb: str
    params_json: str
    idempotency_key: str
    create_object_json: str
    max_attempts: int
    deadline_ms: int
    lock_kind: str
    lock_name: str
    def __init__(self, kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., verb: _Optional[str] = ..., params_json: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., create_object_json: _Optional[str] = ..., max_attempts: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., lock_kind: _Optional[str] = ..., lock_name: _Optional[str] = ...) -> None: ...

class SubmitOperationReply(_message.Message):
    __slots__ = ("operation", "created")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    operation: OperationInfo
    created: bool
    def __init__(self, operation: _Optional[_Union[OperationInfo, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetOperationRequest(_message.Message):
    __slots__ = ("id", "consistency")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    id: str
    consistency: Consistency
    def __init__(self, id: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ("state", "kind", "namespace", "name", "worker", "limit", "continue_token", "consistency")
    STATE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    state: OperationState
    kind: str
    namespace: str
    name: str
    worker: str
    limit: int
    continue_token: str
    consistency: Consistency
    def __init__(self, state: _Optional[_Union[OperationState, str]] = ..., kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., worker: _Optional[str] = ..., limit: _Optional[int] = ..., continue_token: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListOperationsReply(_message.Message):
    __slots__ = ("operations", "continue_token", "now_ms")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[OperationInfo]
    continue_token: str
    now_ms: int
    def __init__(self, operations: _Optional[_Iterable[_Union[OperationInfo, _Mapping]]] = ..., continue_token: _Optional[str] = ..., now_ms: _Optional[int] = ...) -> None: ...

class AbortOperationRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class WatchOperationsRequest(_message.Message):
    __slots__ = ("kind", "namespace", "name", "worker")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    kind: str
    namespace: str
    name: str
    worker: str
    def __init__(self, kind: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., worker: _Optional[str] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("id", "handles", "capacity", "ttl_ms", "registered_ms", "last_heartbeat_ms", "expires_at_ms", "alive", "assigned")
    ID_FIELD_NUMBER: _ClassVar[int]
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    id: str
    handles: _containers.RepeatedScalarFieldContainer[str]
    capacity: int
    ttl_ms: int
    registered_ms: int
    last_heartbeat_ms: int
    expires_at_ms: int
    alive: bool
    assigned: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., handles: _Optional[_Iterable[str]] = ..., capacity: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., registered_ms: _Optional[int] = ..., last_heartbeat_ms: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., alive: _Optional[bool] = ..., assigned: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("worker", "handles", "capacity", "ttl_ms")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    worker: str
    handles: _containers.RepeatedScalarFieldContainer[str]
    capacity: int
    ttl_ms: int
    def __init__(self, worker: _Optional[str] = ..., handles: _Optional[_Iterable[str]] = ..., capacity: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: str
    def __init__(self, worker: _Optional[str] = ...) -> None: ...

class DeregisterWorkerRequest(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: str
    def __init__(self, worker: _Optional[str] = ...) -> None: ...

class DeregisterWorkerReply(_message.Message):
    __slots__ = ("requeued", "failed", "aborted")
    REQUEUED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    requeued: int
    failed: int
    aborted: int
    def __init__(self, requeued: _Optional[int] = ..., failed: _Optional[int] = ..., aborted: _Optional[int] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ("consistency",)
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    consistency: Consistency
    def __init__(self, consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class ListWorkersReply(_message.Message):
    __slots__ = ("workers", "now_ms")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    now_ms: int
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., now_ms: _Optional[int] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("id", "worker", "attempt", "epoch", "kind", "response_json", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    worker: str
    attempt: int
    epoch: int
    kind: ReportKind
    response_json: str
    error: str
    def __init__(self, id: _Optional[str] = ..., worker: _Optional[str] = ..., attempt: _Optional[int] = ..., epoch: _Optional[int] = ..., kind: _Optional[_Union[ReportKind, str]] = ..., response_json: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class AssignmentsRequest(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: str
    def __init__(self, worker: _Optional[str] = ...) -> None: ...

class Assignment(_message.Message):
    __slots__ = ("kind", "operation")
    KIND_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    kind: AssignmentKind
    operation: OperationInfo
    def __init__(self, kind: _Optional[_Union[AssignmentKind, str]] = ..., operation: _Optional[_Union[OperationInfo, _Mapping]] = ...) -> None: ...

class Gvk(_message.Message):
    __slots__ = ("group", "version", "kind")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    group: str
    version: str
    kind: str
    def __init__(self, group: _Optional[str] = ..., version: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class CreateDeploymentRequest(_message.Message):
    __slots__ = ("namespace", "name", "project", "composite_app", "composite_app_version", "composite_profile", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    COMPOSITE_APP_FIELD_NUMBER: _ClassVar[int]
    COMPOSITE_APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    COMPOSITE_PROFILE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    project: str
    composite_app: str
    composite_app_version: str
    composite_profile: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., project: _Optional[str] = ..., composite_app: _Optional[str] = ..., composite_app_version: _Optional[str] = ..., composite_profile: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DeploymentAppResource(_message.Message):
    __slots__ = ("app", "cluster", "gvk", "name", "metadata_json", "spec_json")
    APP_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GVK_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    app: str
    cluster: str
    gvk: Gvk
    name: str
    metadata_json: str
    spec_json: str
    def __init__(self, app: _Optional[str] = ..., cluster: _Optional[str] = ..., gvk: _Optional[_Union[Gvk, _Mapping]] = ..., name: _Optional[str] = ..., metadata_json: _Optional[str] = ..., spec_json: _Optional[str] = ...) -> None: ...

class AddDeploymentResourcesRequest(_message.Message):
    __slots__ = ("namespace", "name", "resources")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    resources: _containers.RepeatedCompositeFieldContainer[DeploymentAppResource]
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[DeploymentAppResource, _Mapping]]] = ...) -> None: ...

class DeploymentActRequest(_message.Message):
    __slots__ = ("namespace", "name", "verb")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERB_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    verb: DeploymentVerb
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., verb: _Optional[_Union[DeploymentVerb, str]] = ...) -> None: ...

class RsyncUpdate(_message.Message):
    __slots__ = ("app", "cluster", "gvk", "resource_name", "status")
    APP_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    GVK_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    app: str
    cluster: str
    gvk: Gvk
    resource_name: str
    status: str
    def __init__(self, app: _Optional[str] = ..., cluster: _Optional[str] = ..., gvk: _Optional[_Union[Gvk, _Mapping]] = ..., resource_name: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class RsyncReportRequest(_message.Message):
    __slots__ = ("namespace", "name", "updates")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    updates: _containers.RepeatedCompositeFieldContainer[RsyncUpdate]
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., updates: _Optional[_Iterable[_Union[RsyncUpdate, _Mapping]]] = ...) -> None: ...

class ContextReportRequest(_message.Message):
    __slots__ = ("namespace", "name", "state")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    state: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class ClusterResource(_message.Message):
    __slots__ = ("gvk", "name", "metadata_json", "spec_json", "status_json")
    GVK_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    gvk: Gvk
    name: str
    metadata_json: str
    spec_json: str
    status_json: str
    def __init__(self, gvk: _Optional[_Union[Gvk, _Mapping]] = ..., name: _Optional[str] = ..., metadata_json: _Optional[str] = ..., spec_json: _Optional[str] = ..., status_json: _Optional[str] = ...) -> None: ...

class ResourceBundle(_message.Message):
    __slots__ = ("app", "cluster", "kinds", "resources", "partial")
    APP_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    app: str
    cluster: str
    kinds: _containers.RepeatedScalarFieldContainer[str]
    resources: _containers.RepeatedCompositeFieldContainer[ClusterResource]
    partial: bool
    def __init__(self, app: _Optional[str] = ..., cluster: _Optional[str] = ..., kinds: _Optional[_Iterable[str]] = ..., resources: _Optional[_Iterable[_Union[ClusterResource, _Mapping]]] = ..., partial: _Optional[bool] = ...) -> None: ...

class ClusterReportRequest(_message.Message):
    __slots__ = ("namespace", "name", "bundles")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BUNDLES_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    bundles: _containers.RepeatedCompositeFieldContainer[ResourceBundle]
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., bundles: _Optional[_Iterable[_Union[ResourceBundle, _Mapping]]] = ...) -> None: ...

class DeploymentStatusRequest(_message.Message):
    __slots__ = ("namespace", "name", "output", "apps", "clusters", "resources", "kinds", "consistency")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    APPS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    output: str
    apps: _containers.RepeatedScalarFieldContainer[str]
    clusters: _containers.RepeatedScalarFieldContainer[str]
    resources: _containers.RepeatedScalarFieldContainer[str]
    kinds: _containers.RepeatedScalarFieldContainer[str]
    consistency: Consistency
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., output: _Optional[str] = ..., apps: _Optional[_Iterable[str]] = ..., clusters: _Optional[_Iterable[str]] = ..., resources: _Optional[_Iterable[str]] = ..., kinds: _Optional[_Iterable[str]] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class DeploymentStatusReply(_message.Message):
    __slots__ = ("status_json", "revision")
    STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    status_json: str
    revision: int
    def __init__(self, status_json: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class PoolResource(_message.Message):
    __slots__ = ("name", "type", "state", "owner", "user_data", "last_update_ms", "request_id", "to_be_deleted", "expiry_ms", "parent")
    class UserDataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ExpiryMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TO_BE_DELETED_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_MS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    state: str
    owner: str
    user_data: _containers.ScalarMap[str, str]
    last_update_ms: int
    request_id: str
    to_be_deleted: bool
    expiry_ms: _containers.ScalarMap[str, int]
    parent: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., state: _Optional[str] = ..., owner: _Optional[str] = ..., user_data: _Optional[_Mapping[str, str]] = ..., last_update_ms: _Optional[int] = ..., request_id: _Optional[str] = ..., to_be_deleted: _Optional[bool] = ..., expiry_ms: _Optional[_Mapping[str, int]] = ..., parent: _Optional[str] = ...) -> None: ...

class PoolResourceReply(_message.Message):
    __slots__ = ("resource", "revision", "leased")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    resource: PoolResource
    revision: int
    leased: _containers.RepeatedCompositeFieldContainer[PoolResource]
    def __init__(self, resource: _Optional[_Union[PoolResource, _Mapping]] = ..., revision: _Optional[int] = ..., leased: _Optional[_Iterable[_Union[PoolResource, _Mapping]]] = ...) -> None: ...

class VirtualConfig(_message.Message):
    __slots__ = ("name", "needs", "config_type", "config_content")
    class NeedsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_CONTENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    needs: _containers.ScalarMap[str, int]
    config_type: str
    config_content: str
    def __init__(self, name: _Optional[str] = ..., needs: _Optional[_Mapping[str, int]] = ..., config_type: _Optional[str] = ..., config_content: _Optional[str] = ...) -> None: ...

class PoolSyncVirtualRequest(_message.Message):
    __slots__ = ("configs",)
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    configs: _containers.RepeatedCompositeFieldContainer[VirtualConfig]
    def __init__(self, configs: _Optional[_Iterable[_Union[VirtualConfig, _Mapping]]] = ...) -> None: ...

class PoolSyncVirtualReply(_message.Message):
    __slots__ = ("changed", "revision")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    changed: int
    revision: int
    def __init__(self, changed: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class PoolResourcesReply(_message.Message):
    __slots__ = ("resources", "revision")
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[PoolResource]
    revision: int
    def __init__(self, resources: _Optional[_Iterable[_Union[PoolResource, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class PoolAcquireRequest(_message.Message):
    __slots__ = ("type", "state", "dest", "owner", "request_id", "wait_ms")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DEST_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    type: str
    state: str
    dest: str
    owner: str
    request_id: str
    wait_ms: int
    def __init__(self, type: _Optional[str] = ..., state: _Optional[str] = ..., dest: _Optional[str] = ..., owner: _Optional[str] = ..., request_id: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class PoolAcquireByStateRequest(_message.Message):
    __slots__ = ("state", "dest", "owner", "names")
    STATE_FIELD_NUMBER: _ClassVar[int]
    DEST_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    state: str
    dest: str
    owner: str
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, state: _Optional[str] = ..., dest: _Optional[str] = ..., owner: _Optional[str] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class PoolUpdateRequest(_message.Message):
    __slots__ = ("name", "owner", "state", "user_data")
    class UserDataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    state: str
    user_data: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., state: _Optional[str] = ..., user_data: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PoolReleaseRequest(_message.Message):
    __slots__ = ("name", "owner", "dest")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    DEST_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    dest: str
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., dest: _Optional[str] = ...) -> None: ...

class PoolSyncEntry(_message.Message):
    __slots__ = ("name", "type", "state")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    state: str
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class PoolTypeExpiry(_message.Message):
    __slots__ = ("expiry_ms",)
    class ExpiryMsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    EXPIRY_MS_FIELD_NUMBER: _ClassVar[int]
    expiry_ms: _containers.ScalarMap[str, int]
    def __init__(self, expiry_ms: _Optional[_Mapping[str, int]] = ...) -> None: ...

class PoolSyncRequest(_message.Message):
    __slots__ = ("resources", "expiry", "dynamic")
    class ExpiryEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PoolTypeExpiry
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PoolTypeExpiry, _Mapping]] = ...) -> None: ...
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[PoolSyncEntry]
    expiry: _containers.MessageMap[str, PoolTypeExpiry]
    dynamic: _containers.RepeatedCompositeFieldContainer[PoolDynamic]
    def __init__(self, resources: _Optional[_Iterable[_Union[PoolSyncEntry, _Mapping]]] = ..., expiry: _Optional[_Mapping[str, PoolTypeExpiry]] = ..., dynamic: _Optional[_Iterable[_Union[PoolDynamic, _Mapping]]] = ...) -> None: ...

class PoolDynamic(_message.Message):
    __slots__ = ("type", "state", "min_count", "max_count", "lifespan_ms")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MIN_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    LIFESPAN_MS_FIELD_NUMBER: _ClassVar[int]
    type: str
    state: str
    min_count: int
    max_count: int
    lifespan_ms: int
    def __init__(self, type: _Optional[str] = ..., state: _Optional[str] = ..., min_count: _Optional[int] = ..., max_count: _Optional[int] = ..., lifespan_ms: _Optional[int] = ...) -> None: ...

class PoolListRequest(_message.Message):
    __slots__ = ("type", "state", "owner", "consistency")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    type: str
    state: str
    owner: str
    consistency: Consistency
    def __init__(self, type: _Optional[str] = ..., state: _Optional[str] = ..., owner: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class PoolMetricsRequest(_message.Message):
    __slots__ = ("type", "consistency")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    type: str
    consistency: Consistency
    def __init__(self, type: _Optional[str] = ..., consistency: _Optional[_Union[Consistency, str]] = ...) -> None: ...

class PoolMetricsReply(_message.Message):
    __slots__ = ("type", "current", "owners", "total", "revision")
    class CurrentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class OwnersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    type: str
    current: _containers.ScalarMap[str, int]
    owners: _containers.ScalarMap[str, int]
    total: int
    revision: int
    def __init__(self, type: _Optional[str] = ..., current: _Optional[_Mapping[str, int]] = ..., owners: _Optional[_Mapping[str, int]] = ..., total: _Optional[int] = ..., revision: _Optional[int] = ...) -> None: ...

class AuthStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AuthStatusReply(_message.Message):
    __slots__ = ("enabled", "revision", "user", "roles")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    revision: int
    user: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, enabled: _Optional[bool] = ..., revision: _Optional[int] = ..., user: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class AuthEnableRequest(_message.Message):
    __slots__ = ("enabled",)
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    def __init__(self, enabled: _Optional[bool] = ...) -> None: ...

class UserInfo(_message.Message):
    __slots__ = ("name", "roles", "has_token", "created_ms", "updated_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    has_token: bool
    created_ms: int
    updated_ms: int
    def __init__(self, name: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., has_token: _Optional[bool] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ...) -> None: ...

class UserReply(_message.Message):
    __slots__ = ("user", "token", "revision")
    USER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    user: UserInfo
    token: str
    revision: int
    def __init__(self, user: _Optional[_Union[UserInfo, _Mapping]] = ..., token: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class UserAddRequest(_message.Message):
    __slots__ = ("name", "roles", "no_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    NO_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    no_token: bool
    def __init__(self, name: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ..., no_token: _Optional[bool] = ...) -> None: ...

class UserGetRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UserListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UserListReply(_message.Message):
    __slots__ = ("users", "revision", "enabled")
    USERS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[UserInfo]
    revision: int
    enabled: bool
    def __init__(self, users: _Optional[_Iterable[_Union[UserInfo, _Mapping]]] = ..., revision: _Optional[int] = ..., enabled: _Optional[bool] = ...) -> None: ...

class UserRolesRequest(_message.Message):
    __slots__ = ("name", "grant", "revoke")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    REVOKE_FIELD_NUMBER: _ClassVar[int]
    name: str
    grant: _containers.RepeatedScalarFieldContainer[str]
    revoke: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., grant: _Optional[_Iterable[str]] = ..., revoke: _Optional[_Iterable[str]] = ...) -> None: ...

class UserTokenRequest(_message.Message):
    __slots__ = ("name", "no_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NO_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    no_token: bool
    def __init__(self, name: _Optional[str] = ..., no_token: _Optional[bool] = ...) -> None: ...

class UserDeleteRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UserDeleteReply(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...
