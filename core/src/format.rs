//! The formats steward writes and still reads, in one place.
//!
//! - Log entries (`Proposal`, serde JSON inside openraft's entry): [`LOG_FORMAT`].
//!   - 1 (before issue 23): `Command` was one flat enum of PascalCase variants
//!     (`{"LockAcquire":{..}}`, `{"Create":{..}}`).
//!   - 2: `Command` is grouped by capability under snake_case tags
//!     (`{"locks":{"Acquire":{..}}}`, `{"objects":{"Create":{..}}}`).
//!
//!   Format 2 is written; both are read. An entry does not name its format: the two sets of tags
//!   cannot be confused (snake_case against PascalCase), so the tag says which, and a format-1
//!   entry becomes the very command format 2 would have written (the fields are the same).
//! - Snapshots: [`SNAPSHOT_FORMAT`] (the body's own `format` field; `snapshot.rs` reads every
//!   earlier one). Issue 23 did not change it.
//! - Responses and forwarded commands travel only between nodes of one build (no mixed-version
//!   cluster is supported yet), so they carry no format.

use serde::Deserialize;

use crate::alarms::AlarmAction;
use crate::auth::AuthAction;
use crate::command::{Command, MemberCommand};
use crate::deployments::command::DeploymentCommand;
use crate::deployments::{DeploymentAction, StatusLimits};
use crate::locks::command::LockCommand;
use crate::locks::{Fence, LockLimits, LockMode};
use crate::objects::command::{ObjectCommand, TxnOp};
use crate::objects::resource::{ObjectKey, Resource};
use crate::operations::command::{OperationCommand, WorkerReport};
use crate::operations::{Handle, OpLimits, OpPolicy, OperationId};
use crate::pools::command::PoolCommand;
use crate::pools::PoolAction;
use crate::reservations::command::ReservationCommand;

/// The log entry format written now.
pub const LOG_FORMAT: u32 = 2;

pub use crate::snapshot::SNAPSHOT_FORMAT;

/// Every command tag a log entry may hold: format 2's (snake_case) and format 1's (PascalCase,
/// frozen here as they were written: never change a field of these).
#[allow(clippy::large_enum_variant)]
#[derive(Deserialize)]
pub enum AnyCommand {
    #[serde(rename = "objects")]
    Objects(ObjectCommand),
    #[serde(rename = "locks")]
    Locks(LockCommand),
    #[serde(rename = "operations")]
    Operations(OperationCommand),
    #[serde(rename = "reservations")]
    Reservations(ReservationCommand),
    #[serde(rename = "deployments")]
    Deployments(DeploymentCommand),
    #[serde(rename = "pools")]
    Pools(PoolCommand),
    #[serde(rename = "auth")]
    Auth(AuthAction),
    #[serde(rename = "alarms")]
    Alarms(AlarmAction),
    #[serde(rename = "members")]
    Members(MemberCommand),
    #[serde(rename = "guarded")]
    Guarded {
        auth_revision: u64,
        command: Box<Command>,
    },
    // Format 1.
    #[serde(rename = "Create")]
    V1Create {
        object: Resource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "Update")]
    V1Update {
        object: Resource,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "UpdateStatus")]
    V1UpdateStatus {
        object: Resource,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "Delete")]
    V1Delete {
        key: ObjectKey,
        expected_revision: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "Txn")]
    V1Txn {
        ops: Vec<TxnOp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<Fence>,
    },
    #[serde(rename = "RetireNode")]
    V1RetireNode { node_id: u64 },
    #[serde(rename = "LockAcquire")]
    V1LockAcquire {
        name: String,
        holder: String,
        mode: LockMode,
        ttl_ms: Option<u64>,
        details: serde_json::Value,
        wait_ms: u64,
        limits: LockLimits,
    },
    #[serde(rename = "LockRefresh")]
    V1LockRefresh {
        name: String,
        holder: String,
        token: u64,
        ttl_ms: Option<u64>,
    },
    #[serde(rename = "LockRelease")]
    V1LockRelease {
        name: String,
        holder: String,
        token: u64,
    },
    #[serde(rename = "LockCancelWait")]
    V1LockCancelWait {
        name: String,
        holder: String,
        wait_id: u64,
    },
    #[serde(rename = "LockSweep")]
    V1LockSweep {
        names: Vec<String>,
        grace_ms: u64,
        lock_delay_ms: u64,
    },
    #[serde(rename = "WorkerRegister")]
    V1WorkerRegister {
        worker: String,
        handles: Vec<Handle>,
        capacity: u32,
        ttl_ms: u64,
        limits: OpLimits,
    },
    #[serde(rename = "WorkerHeartbeat")]
    V1WorkerHeartbeat { worker: String },
    #[serde(rename = "WorkerDeregister")]
    V1WorkerDeregister { worker: String, limits: OpLimits },
    #[serde(rename = "OpSubmit")]
    V1OpSubmit {
        target: ObjectKey,
        verb: String,
        params: serde_json::Value,
        idempotency_key: Option<String>,
        create: Option<Resource>,
        policy: OpPolicy,
        limits: OpLimits,
    },
    #[serde(rename = "OpAssign")]
    V1OpAssign {
        id: OperationId,
        worker: String,
        lock_limits: LockLimits,
    },
    #[serde(rename = "OpReport")]
    V1OpReport {
        id: OperationId,
        worker: String,
        attempt: u32,
        epoch: u64,
        report: WorkerReport,
        limits: OpLimits,
    },
    #[serde(rename = "OpAbort")]
    V1OpAbort { id: OperationId, limits: OpLimits },
    #[serde(rename = "OpSweep")]
    V1OpSweep {
        workers: Vec<String>,
        operations: Vec<OperationId>,
        grace_ms: u64,
        limits: OpLimits,
    },
    #[serde(rename = "Decommission")]
    V1Decommission {
        target: ObjectKey,
        verb: String,
        policy: OpPolicy,
        limits: OpLimits,
    },
    #[serde(rename = "Deployment")]
    V1Deployment {
        key: ObjectKey,
        action: DeploymentAction,
        limits: StatusLimits,
    },
    #[serde(rename = "Pool")]
    V1Pool {
        action: PoolAction,
        #[serde(default)]
        grace_ms: u64,
    },
    #[serde(rename = "Auth")]
    V1Auth { action: AuthAction },
    #[serde(rename = "Alarm")]
    V1Alarm { action: AlarmAction },
    #[serde(rename = "Guarded")]
    V1Guarded {
        auth_revision: u64,
        command: Box<Command>,
    },
}

impl From<AnyCommand> for Command {
    fn from(any: AnyCommand) -> Command {
        match any {
            AnyCommand::Objects(c) => Command::Objects(c),
            AnyCommand::Locks(c) => Command::Locks(c),
            AnyCommand::Operations(c) => Command::Operations(c),
            AnyCommand::Reservations(c) => Command::Reservations(c),
            AnyCommand::Deployments(c) => Command::Deployments(c),
            AnyCommand::Pools(c) => Command::Pools(c),
            AnyCommand::Auth(c) => Command::Auth(c),
            AnyCommand::Alarms(c) => Command::Alarms(c),
            AnyCommand::Members(c) => Command::Members(c),
            AnyCommand::Guarded {
                auth_revision,
                command,
            }
            | AnyCommand::V1Guarded {
                auth_revision,
                command,
            } => Command::Guarded {
                auth_revision,
                command,
            },
            AnyCommand::V1Create { object, fence } => {
                ObjectCommand::Create { object, fence }.into()
            }
            AnyCommand::V1Update {
                object,
                expected_revision,
                fence,
            } => ObjectCommand::Update {
                object,
                expected_revision,
                fence,
            }
            .into(),
            AnyCommand::V1UpdateStatus {
                object,
                expected_revision,
                fence,
            } => ObjectCommand::UpdateStatus {
                object,
                expected_revision,
                fence,
            }
            .into(),
            AnyCommand::V1Delete {
                key,
                expected_revision,
                fence,
            } => ObjectCommand::Delete {
                key,
                expected_revision,
                fence,
            }
            .into(),
            AnyCommand::V1Txn { ops, fence } => ObjectCommand::Txn { ops, fence }.into(),
            AnyCommand::V1RetireNode { node_id } => MemberCommand::Retire { node_id }.into(),
            AnyCommand::V1LockAcquire {
                name,
                holder,
                mode,
                ttl_ms,
                details,
                wait_ms,
                limits,
            } => LockCommand::Acquire {
                name,
                holder,
                mode,
                ttl_ms,
                details,
                wait_ms,
                limits,
            }
            .into(),
            AnyCommand::V1LockRefresh {
                name,
                holder,
                token,
                ttl_ms,
            } => LockCommand::Refresh {
                name,
                holder,
                token,
                ttl_ms,
            }
            .into(),
            AnyCommand::V1LockRelease {
                name,
                holder,
                token,
            } => LockCommand::Release {
                name,
                holder,
                token,
            }
            .into(),
            AnyCommand::V1LockCancelWait {
                name,
                holder,
                wait_id,
            } => LockCommand::CancelWait {
                name,
                holder,
                wait_id,
            }
            .into(),
            AnyCommand::V1LockSweep {
                names,
                grace_ms,
                lock_delay_ms,
            } => LockCommand::Sweep {
                names,
                grace_ms,
                lock_delay_ms,
            }
            .into(),
            AnyCommand::V1WorkerRegister {
                worker,
                handles,
                capacity,
                ttl_ms,
                limits,
            } => OperationCommand::RegisterWorker {
                worker,
                handles,
                capacity,
                ttl_ms,
                limits,
            }
            .into(),
            AnyCommand::V1WorkerHeartbeat { worker } => {
                OperationCommand::Heartbeat { worker }.into()
            }
            AnyCommand::V1WorkerDeregister { worker, limits } => {
                OperationCommand::DeregisterWorker { worker, limits }.into()
            }
            AnyCommand::V1OpSubmit {
                target,
                verb,
                params,
                idempotency_key,
                create,
                policy,
                limits,
            } => OperationCommand::Submit {
                target,
                verb,
                params,
                idempotency_key,
                create,
                policy,
                limits,
            }
            .into(),
            AnyCommand::V1OpAssign {
                id,
                worker,
                lock_limits,
            } => OperationCommand::Assign {
                id,
                worker,
                lock_limits,
            }
            .into(),
            AnyCommand::V1OpReport {
                id,
                worker,
                attempt,
                epoch,
                report,
                limits,
            } => OperationCommand::Report {
                id,
                worker,
                attempt,
                epoch,
                report,
                limits,
            }
            .into(),
            AnyCommand::V1OpAbort { id, limits } => OperationCommand::Abort { id, limits }.into(),
            AnyCommand::V1OpSweep {
                workers,
                operations,
                grace_ms,
                limits,
            } => OperationCommand::Sweep {
                workers,
                operations,
                grace_ms,
                limits,
            }
            .into(),
            AnyCommand::V1Decommission {
                target,
                verb,
                policy,
                limits,
            } => ReservationCommand::Decommission {
                target,
                verb,
                policy,
                limits,
            }
            .into(),
            AnyCommand::V1Deployment {
                key,
                action,
                limits,
            } => DeploymentCommand {
                key,
                action,
                limits,
            }
            .into(),
            AnyCommand::V1Pool { action, grace_ms } => PoolCommand { action, grace_ms }.into(),
            AnyCommand::V1Auth { action } => Command::Auth(action),
            AnyCommand::V1Alarm { action } => Command::Alarms(action),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// (format-1 entry, the format-2 entry it must become).
    fn pairs() -> Vec<(Value, Value)> {
        let key = json!({"kind": "Director", "namespace": "default", "name": "d1"});
        let release = json!({"name": "l", "holder": "h", "token": 7});
        vec![
            (
                json!({"RetireNode": {"node_id": 3}}),
                json!({"members": {"Retire": {"node_id": 3}}}),
            ),
            (
                json!({"LockRelease": release}),
                json!({"locks": {"Release": release}}),
            ),
            (
                json!({"LockRefresh": {"name": "l", "holder": "h", "token": 7, "ttl_ms": 500}}),
                json!({"locks": {"Refresh": {"name": "l", "holder": "h", "token": 7, "ttl_ms": 500}}}),
            ),
            (
                json!({"LockCancelWait": {"name": "l", "holder": "h", "wait_id": 9}}),
                json!({"locks": {"CancelWait": {"name": "l", "holder": "h", "wait_id": 9}}}),
            ),
            (
                json!({"LockSweep": {"names": ["a"], "grace_ms": 1, "lock_delay_ms": 2}}),
                json!({"locks": {"Sweep": {"names": ["a"], "grace_ms": 1, "lock_delay_ms": 2}}}),
            ),
            (
                json!({"WorkerHeartbeat": {"worker": "w"}}),
                json!({"operations": {"Heartbeat": {"worker": "w"}}}),
            ),
            (
                json!({"Delete": {"key": key, "expected_revision": 4}}),
                json!({"objects": {"Delete": {"key": key, "expected_revision": 4}}}),
            ),
            (
                json!({"Txn": {"ops": [{"Delete": {"key": key, "expected_revision": null}}]}}),
                json!({"objects": {"Txn": {"ops": [{"Delete": {"key": key, "expected_revision": null}}]}}}),
            ),
            (
                json!({"Guarded": {"auth_revision": 2, "command": {"LockRelease": release}}}),
                json!({"guarded": {"auth_revision": 2, "command": {"locks": {"Release": release}}}}),
            ),
        ]
    }

    #[test]
    fn format_1_entries_become_the_format_2_commands() {
        for (old, new) in pairs() {
            let from_old: Command = serde_json::from_value(old.clone()).expect("format 1 reads");
            let from_new: Command = serde_json::from_value(new.clone()).expect("format 2 reads");
            let written = serde_json::to_value(&from_old).expect("write");
            assert_eq!(written, new, "{old} was read as {from_old:?}");
            assert_eq!(serde_json::to_value(&from_new).expect("write"), new);
        }
    }

    #[test]
    fn format_2_is_what_is_written() {
        let proposal = crate::Proposal {
            time_ms: 5,
            command: MemberCommand::Retire { node_id: 1 }.into(),
        };
        assert_eq!(
            serde_json::to_string(&proposal).expect("write"),
            r#"{"time_ms":5,"command":{"members":{"Retire":{"node_id":1}}}}"#
        );
        assert_eq!(LOG_FORMAT, 2);
    }

    /// Format-1 entries written by the format-1 serializer itself (commit 7faeb11), one or more
    /// per command variant, with the fields set to values a real cluster would write. How the
    /// file was made, and the generator's code: `format/README.md`.
    const V1_GOLDEN: &str = include_str!("format/v1_golden.jsonl");

    /// The tags `T`'s derived `Deserialize` accepts, in declaration order: the derive hands them
    /// to `deserialize_enum`, which is all this deserializer does.
    fn enum_tags<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
        use serde::de::{self, Visitor};

        struct Tags<'a>(&'a mut Vec<&'static str>);

        impl<'de> de::Deserializer<'de> for Tags<'_> {
            type Error = de::value::Error;

            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("not an enum"))
            }

            fn deserialize_enum<V: Visitor<'de>>(
                self,
                _name: &'static str,
                variants: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0.extend_from_slice(variants);
                Err(de::Error::custom("only the tags were wanted"))
            }

            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                struct identifier ignored_any
            }
        }

        let mut tags = Vec::new();
        let _ = T::deserialize(Tags(&mut tags));
        tags
    }

    /// Every (field name, value) of a scalar that is not null, anywhere in `value`, sorted: the
    /// data an entry carries, whatever the nesting of its tags.
    fn leaves(value: &Value) -> Vec<(String, String)> {
        fn walk(name: &str, value: &Value, out: &mut Vec<(String, String)>) {
            match value {
                Value::Null => {}
                Value::Object(fields) => {
                    for (field, v) in fields {
                        walk(field, v, out);
                    }
                }
                Value::Array(items) => {
                    for v in items {
                        walk(name, v, out);
                    }
                }
                scalar => out.push((name.to_string(), scalar.to_string())),
            }
        }
        let mut out = Vec::new();
        walk("", value, &mut out);
        out.sort();
        out
    }

    #[test]
    fn golden_format_1_entries_read_and_rewrite_as_format_2() {
        let mut seen = std::collections::BTreeSet::new();
        for line in V1_GOLDEN.lines() {
            let old: Value = serde_json::from_str(line).expect("a JSON line");
            let tag = |command: &Value| -> String {
                let tags: Vec<&String> = command
                    .as_object()
                    .expect("a tagged command")
                    .keys()
                    .collect();
                assert_eq!(tags.len(), 1, "{command}");
                tags[0].clone()
            };
            seen.insert(tag(&old["command"]));
            if let Some(inner) = old["command"]["Guarded"]["command"].as_object() {
                seen.insert(tag(&Value::Object(inner.clone())));
            }

            let read: crate::Proposal = serde_json::from_str(line).expect("format 1 reads");
            let written = serde_json::to_string(&read).expect("write");
            let reread: crate::Proposal = serde_json::from_str(&written).expect("format 2 reads");
            assert_eq!(
                serde_json::to_value(&read.command).expect("write"),
                serde_json::to_value(&reread.command).expect("write"),
                "{line}\nwas written as\n{written}"
            );
            assert_eq!(read.time_ms, reread.time_ms);

            // Written in format 2 (a snake_case family tag, nested ones too), and nothing the
            // format-1 entry carried was dropped on the way (serde ignores unknown fields).
            let new: Value = serde_json::from_str(&written).expect("JSON");
            let family = tag(&new["command"]);
            assert!(
                family.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{written}"
            );
            if let Some(inner) = new["command"]["guarded"]["command"].as_object() {
                let family = tag(&Value::Object(inner.clone()));
                assert!(
                    family.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                    "{written}"
                );
            }
            assert_eq!(
                leaves(&old),
                leaves(&new),
                "{line}\nwas written as\n{written}"
            );
        }

        let v1_tags: Vec<&str> = enum_tags::<AnyCommand>()
            .into_iter()
            .filter(|tag| tag.starts_with(|c: char| c.is_ascii_uppercase()))
            .collect();
        assert_eq!(v1_tags.len(), 25, "format 1 has 25 commands: {v1_tags:?}");
        let missing: Vec<&&str> = v1_tags.iter().filter(|t| !seen.contains(**t)).collect();
        assert!(missing.is_empty(), "no golden entry for {missing:?}");
    }

    #[test]
    fn an_unknown_tag_is_refused() {
        let err = serde_json::from_value::<Command>(json!({"Frobnicate": {}})).unwrap_err();
        assert!(err.to_string().contains("unknown variant"), "{err}");
    }
}
