//! Leased resource pools, as Boskos keeps them (seed 002): resources of a type, each in a state
//! (free, dirty, busy, cleaning, or any other), leased to one owner at a time, with user data
//! and the time of their last update. Here the pool lives in the replicated state machine, so a
//! resource is never leased twice, whatever fails.
//!
//! Each pool resource is a store object of kind `PoolResource` (so get, list, watch and count
//! work on pools): labels `type`, `state` and `owner` (counted incrementally by `count`), spec
//! `{type, expiry}` and status `{state, owner, userData, lastUpdate, lastUpdateMs, requestId}`.
//! Only `Command::Pool` writes them (resource writes to the kind are refused), so `PoolView`
//! can always read them back.
//!
//! `PoolIndex` answers without a scan: the unowned resources of each (type, state) oldest-updated
//! first (what Acquire takes), the lease of each (owner, request id) (what a repeated Acquire
//! answers), and the leases whose state has an expiry, by when they expire (what the leader's
//! reaper resets). Derived from the objects alone, kept in step by every object change, rebuilt
//! on restore, never snapshotted.

use std::collections::BTreeMap;

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::objects::resource::Resource;
use crate::rejection::Rejection;

pub(crate) mod apply;
pub mod command;
mod dynamic;
#[cfg(test)]
mod dynamic_tests;
mod index;
mod mason;
#[cfg(test)]
mod mason_tests;
mod queries;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod wait_tests;

pub use dynamic::{dynamic_name, DynamicPool, DYNAMIC_COUNT_MAX, DYNAMIC_KIND};
pub use index::PoolIndex;
pub use mason::{
    leased_of, VirtualConfig, CONSTRUCTING, CONSTRUCT_KIND, FULFILLING, LEASED_RESOURCES,
    MASON_OWNER, VIRTUAL_CONFIGS_MAX, VIRTUAL_CONFIG_KIND, VIRTUAL_CONTENT_BYTES_MAX,
    VIRTUAL_NEEDS_MAX,
};

/// The kind of pool resource objects.
pub const POOL_KIND: &str = "PoolResource";
/// Their apiVersion.
pub const POOL_API_VERSION: &str = "steward.io/v1";
/// The kind of the objects that hold waiting acquires (claims), one per waiter.
pub const POOL_CLAIM_KIND: &str = "PoolClaim";
/// Longest an acquire may wait in the queue: one hour.
pub const POOL_WAIT_MS_MAX: u64 = 3_600_000;
/// Most acquires waiting for one (type, state).
pub const POOL_WAITERS_MAX: usize = 1000;
/// Most names in one AcquireByState, and resources in one Reset or Sync.
pub const POOL_ITEMS_MAX: usize = 1000;
/// Most user data entries on one resource.
pub const POOL_USER_DATA_MAX: usize = 64;
/// Largest user data value, in bytes (Mason keeps a JSON list of leased resources there).
pub const POOL_USER_DATA_BYTES_MAX: usize = 16 * 1024;

/// A pool resource as its object holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolView {
    pub rtype: String,
    pub state: String,
    /// Empty when not leased.
    pub owner: String,
    pub user_data: BTreeMap<String, String>,
    pub last_update_ms: u64,
    /// The request id of the Acquire that leased it, while leased.
    pub request_id: String,
    /// How long a lease may go without an update in a state before the reaper resets it.
    pub expiry_ms: BTreeMap<String, u64>,
    /// Removed from the config while leased: deleted on release.
    pub to_be_deleted: bool,
    /// The virtual resource this one is leased with (Mason): it follows its parent's lease and
    /// cannot be acquired, updated or released on its own.
    pub parent: String,
    /// A virtual resource being constructed: the idempotency key of its construct operation.
    pub construct_key: String,
    /// A dynamic pool's resource: when its lifespan ends (0: never).
    pub delete_after_ms: u64,
    /// A dynamic pool's resource: when it was created.
    pub created_ms: u64,
}

fn str_field<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

impl PoolView {
    /// The view of a `PoolResource` object (`None` for any other kind).
    pub fn of(object: &Resource) -> Option<PoolView> {
        if object.kind != POOL_KIND {
            return None;
        }
        let spec = object.spec.to_value();
        let status = &object.status;
        let map = |v: Option<&Value>| -> BTreeMap<String, String> {
            v.and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                        .collect()
                })
                .unwrap_or_default()
        };
        let expiry_ms = spec
            .get("expiryMs")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_u64().map(|ms| (k.clone(), ms)))
                    .collect()
            })
            .unwrap_or_default();
        Some(PoolView {
            rtype: str_field(&spec, "type").to_string(),
            state: str_field(status, "state").to_string(),
            owner: str_field(status, "owner").to_string(),
            user_data: map(status.get("userData")),
            last_update_ms: status
                .get("lastUpdateMs")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            request_id: str_field(status, "requestId").to_string(),
            expiry_ms,
            to_be_deleted: status
                .get("toBeDeleted")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            parent: str_field(status, "parent").to_string(),
            construct_key: str_field(status, "constructKey").to_string(),
            delete_after_ms: status
                .get("deleteAfterMs")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            created_ms: status.get("createdMs").and_then(Value::as_u64).unwrap_or(0),
        })
    }

    /// Writes this view into `object`: labels `type`, `state`, `owner` (only when leased), spec
    /// and status. Other labels and annotations are kept.
    pub fn write(&self, object: &mut Resource) {
        let labels = &mut object.metadata.labels;
        labels.insert("type".into(), self.rtype.clone());
        labels.insert("state".into(), self.state.clone());
        if self.owner.is_empty() {
            labels.remove("owner");
        } else {
            labels.insert("owner".into(), self.owner.clone());
        }
        let mut spec = json!({"type": self.rtype});
        if !self.expiry_ms.is_empty() {
            spec["expiryMs"] = json!(self.expiry_ms);
        }
        object.spec = crate::objects::raw_json::RawJson::from_value(&spec);
        let mut status = json!({
            "state": self.state,
            "owner": self.owner,
            "userData": self.user_data,
            "lastUpdate": rfc3339_ms(self.last_update_ms),
            "lastUpdateMs": self.last_update_ms,
        });
        if !self.request_id.is_empty() {
            status["requestId"] = json!(self.request_id);
        }
        if self.to_be_deleted {
            status["toBeDeleted"] = json!(true);
        }
        if !self.parent.is_empty() {
            status["parent"] = json!(self.parent);
        }
        if !self.construct_key.is_empty() {
            status["constructKey"] = json!(self.construct_key);
        }
        if self.created_ms > 0 {
            status["createdMs"] = json!(self.created_ms);
        }
        if self.delete_after_ms > 0 {
            status["deleteAfterMs"] = json!(self.delete_after_ms);
            status["deleteAfter"] = json!(rfc3339_ms(self.delete_after_ms));
        }
        object.status = status;
    }

    /// When the reaper may reset this lease: leased, in a state with an expiry. A resource
    /// leased with a virtual one follows its parent's lease and never expires on its own.
    pub fn expires_ms(&self) -> Option<u64> {
        if self.owner.is_empty() || !self.parent.is_empty() {
            return None;
        }
        let expiry = self.expiry_ms.get(&self.state)?;
        Some(self.last_update_ms.saturating_add(*expiry))
    }
}

/// A waiting acquire, as its `PoolClaim` object holds it: queued for (type, state) in order of
/// `seq` (the log index of its Acquire), until `deadline_ms`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimView {
    pub rtype: String,
    pub state: String,
    pub dest: String,
    pub owner: String,
    /// The request id the lease will carry (the caller's, or `claim-<seq>`).
    pub request_id: String,
    pub seq: u64,
    pub deadline_ms: u64,
}

impl ClaimView {
    /// The view of a `PoolClaim` object (`None` for any other kind).
    pub fn of(object: &Resource) -> Option<ClaimView> {
        if object.kind != POOL_CLAIM_KIND {
            return None;
        }
        let st = &object.status;
        let num = |f: &str| st.get(f).and_then(Value::as_u64).unwrap_or(0);
        Some(ClaimView {
            rtype: str_field(st, "type").to_string(),
            state: str_field(st, "state").to_string(),
            dest: str_field(st, "dest").to_string(),
            owner: str_field(st, "owner").to_string(),
            request_id: str_field(st, "requestId").to_string(),
            seq: num("seq"),
            deadline_ms: num("deadlineMs"),
        })
    }

    /// A new claim object named `claim-<seq>`.
    pub fn object(&self) -> Resource {
        let mut o = Resource::new(
            POOL_API_VERSION,
            POOL_CLAIM_KIND,
            crate::DEFAULT_NAMESPACE,
            &claim_name(self.seq),
        );
        let labels = &mut o.metadata.labels;
        labels.insert("type".into(), self.rtype.clone());
        labels.insert("state".into(), self.state.clone());
        labels.insert("owner".into(), self.owner.clone());
        o.status = json!({
            "type": self.rtype,
            "state": self.state,
            "dest": self.dest,
            "owner": self.owner,
            "requestId": self.request_id,
            "seq": self.seq,
            "deadlineMs": self.deadline_ms,
            "deadline": rfc3339_ms(self.deadline_ms),
        });
        o
    }
}

/// The name of the claim of the acquire at log index `seq`.
pub fn claim_name(seq: u64) -> String {
    format!("claim-{seq}")
}

/// `2026-11-22T10:00:00.123Z`.
fn rfc3339_ms(ms: u64) -> String {
    const MS_MAX: u64 = 253_402_300_799_999;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.min(MS_MAX));
    humantime::format_rfc3339_millis(t).to_string()
}

/// One resource of a pool config (Boskos' `resources:` entries, expanded to names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolEntry {
    pub name: String,
    pub rtype: String,
    /// The state a new resource starts in.
    pub state: String,
}

/// What a pool command did that a task elsewhere waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolEvent {
    /// What became of a waiting acquire, for the node that waits on it: granted `resource`, or
    /// (`None`) removed without a grant (cancelled, or past its deadline).
    Claim {
        claim: String,
        resource: Option<String>,
    },
    /// Virtual resource `name` has its needs leased and waits for its construct operation,
    /// which the leader's Mason task submits.
    Fulfilled { name: String },
}

/// What the leader's Mason task has to propose for one virtual resource being constructed.
#[derive(Clone, Debug, PartialEq)]
pub enum MasonDue {
    /// Submit its construct operation: on `MasonConstruct/<name>`, with this idempotency key
    /// (so a repeat finds the first) and the construct object's spec as params.
    Submit {
        name: String,
        key: String,
        params: Value,
    },
    /// Its construct operation ended: propose `Constructed`.
    Ended { name: String },
}

/// What a `Command::Pool` asks. Each is all or nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolAction {
    /// Lease the oldest-updated unowned resource of `rtype` in `state`, moving it to `dest`. A
    /// repeated `request_id` of the same owner answers the lease it took.
    Acquire {
        rtype: String,
        state: String,
        dest: String,
        owner: String,
        #[serde(default)]
        request_id: String,
        /// 0: answer at once. Else, when nothing is free (or others wait first), queue behind
        /// the earlier waiters for at most this long.
        #[serde(default)]
        wait_ms: u64,
    },
    /// The waiter of `claim` (`owner`'s) gives up: its claim is removed. If it was granted
    /// meanwhile and `release` is set (nobody is left to take the lease), the lease goes back to
    /// the state it was acquired from; else it stays (the caller answers it).
    CancelWait {
        claim: String,
        owner: String,
        /// The request id and state of the acquire, to find a lease granted meanwhile.
        request_id: String,
        state: String,
        #[serde(default)]
        release: bool,
    },
    /// The leader's reaper: claims past their deadline are removed (their waiters are gone or
    /// about to give up).
    ExpireClaims { claims: Vec<String> },
    /// Lease every named resource, each unowned and in `state`, or none.
    AcquireByState {
        state: String,
        dest: String,
        owner: String,
        names: Vec<String>,
    },
    /// The owner's heartbeat: `state` must be the current one; user data merges (an empty value
    /// removes its key).
    Update {
        name: String,
        owner: String,
        state: String,
        user_data: BTreeMap<String, String>,
    },
    /// Give a lease back, moving the resource to `dest`.
    Release {
        name: String,
        owner: String,
        dest: String,
    },
    /// The leader's reaper: leases whose state's expiry passed go to `dest`, unowned. Apply
    /// re-checks each against this entry's time.
    Reset { names: Vec<String>, dest: String },
    /// Make the pool hold exactly `entries` (a config): new names are added unowned in their
    /// state, gone unowned ones removed, gone leased ones marked to be deleted on release; the
    /// expiries of each type are set.
    Sync {
        entries: Vec<PoolEntry>,
        #[serde(default)]
        expiry_ms: BTreeMap<String, BTreeMap<String, u64>>,
        /// The dynamic types (their resources are not listed in `entries` and stay).
        #[serde(default)]
        dynamic: Vec<DynamicPool>,
    },
    /// The leader's reaper: look at the dynamic pools again at this entry's time (resources
    /// past their lifespan are deleted, the counts kept within min and max).
    Reconcile,
    /// Make the virtual resource configs (Mason's) exactly `configs`: each names a virtual
    /// type, what one needs and the opaque config its constructor gets.
    SyncVirtual { configs: Vec<VirtualConfig> },
    /// The leader's Mason task: the construct operation of virtual resource `name` ended; on
    /// success its response becomes the user data and the resource is freed, else its needs go
    /// back dirty and it waits for new ones.
    Constructed { name: String },
}

impl PoolAction {
    pub fn verb(&self) -> &'static str {
        match self {
            PoolAction::Acquire { .. } => "acquire",
            PoolAction::CancelWait { .. } => "cancel-wait",
            PoolAction::ExpireClaims { .. } => "expire-claims",
            PoolAction::AcquireByState { .. } => "acquire-by-state",
            PoolAction::Update { .. } => "update",
            PoolAction::Release { .. } => "release",
            PoolAction::Reset { .. } => "reset",
            PoolAction::Sync { .. } => "sync",
            PoolAction::SyncVirtual { .. } => "sync-virtual",
            PoolAction::Reconcile => "reconcile",
            PoolAction::Constructed { .. } => "constructed",
        }
    }
}

pub(crate) fn invalid(field: &str, rule: impl Into<String>) -> Rejection {
    Rejection::Invalid {
        field: field.to_string(),
        rule: rule.into(),
    }
}

/// A type, state or owner: a label value (1-63 characters, alphanumerics, '-', '_', '.',
/// starting and ending alphanumeric), since each is a label of the resource.
pub(crate) fn check_word(field: &str, value: &str) -> Result<(), Rejection> {
    if value.is_empty() {
        return Err(invalid(field, "required"));
    }
    crate::objects::validate::validate_label_value(field, value)
}

pub(crate) fn check_names(field: &str, names: &[String]) -> Result<(), Rejection> {
    if names.is_empty() {
        return Err(invalid(field, "at least one name"));
    }
    if names.len() > POOL_ITEMS_MAX {
        return Err(Rejection::TooLarge {
            field: field.to_string(),
            rule: format!(
                "{} names, more than POOL_ITEMS_MAX = {POOL_ITEMS_MAX}",
                names.len()
            ),
        });
    }
    for (i, name) in names.iter().enumerate() {
        let key =
            crate::objects::resource::ObjectKey::new(POOL_KIND, crate::DEFAULT_NAMESPACE, name);
        crate::objects::validate::validate_key(&key).map_err(|e| match e {
            Rejection::Invalid { rule, .. } => invalid(&format!("{field}[{i}]"), rule),
            other => other,
        })?;
    }
    Ok(())
}

fn check_user_data(data: &BTreeMap<String, String>) -> Result<(), Rejection> {
    if data.len() > POOL_USER_DATA_MAX {
        return Err(Rejection::TooLarge {
            field: "user_data".to_string(),
            rule: format!(
                "{} entries, more than POOL_USER_DATA_MAX = {POOL_USER_DATA_MAX}",
                data.len()
            ),
        });
    }
    for (k, v) in data {
        if k.is_empty() || k.len() > 253 {
            return Err(invalid("user_data", "keys are 1 to 253 bytes"));
        }
        if v.len() > POOL_USER_DATA_BYTES_MAX {
            return Err(Rejection::TooLarge {
                field: format!("user_data[{k}]"),
                rule: format!(
                    "{} bytes, more than POOL_USER_DATA_BYTES_MAX = {POOL_USER_DATA_BYTES_MAX}",
                    v.len()
                ),
            });
        }
    }
    Ok(())
}

/// The structural checks of an action: names, words, sizes. Servers run it before proposing;
/// apply runs it again.
pub fn check_pool_action(action: &PoolAction) -> Result<(), Rejection> {
    match action {
        PoolAction::Acquire {
            rtype,
            state,
            dest,
            owner,
            request_id,
            wait_ms,
        } => {
            check_word("type", rtype)?;
            check_word("state", state)?;
            check_word("dest", dest)?;
            check_word("owner", owner)?;
            if request_id.len() > 253 {
                return Err(invalid("request_id", "at most 253 bytes"));
            }
            if *wait_ms > POOL_WAIT_MS_MAX {
                return Err(invalid(
                    "wait_ms",
                    format!("{wait_ms} is more than POOL_WAIT_MS_MAX = {POOL_WAIT_MS_MAX}"),
                ));
            }
        }
        PoolAction::CancelWait {
            claim,
            owner,
            state,
            ..
        } => {
            check_names("claim", std::slice::from_ref(claim))?;
            check_word("owner", owner)?;
            check_word("state", state)?;
        }
        PoolAction::ExpireClaims { claims } => check_names("claims", claims)?,
        PoolAction::AcquireByState {
            state,
            dest,
            owner,
            names,
        } => {
            check_word("state", state)?;
            check_word("dest", dest)?;
            check_word("owner", owner)?;
            check_names("names", names)?;
        }
        PoolAction::Update {
            name,
            owner,
            state,
            user_data,
        } => {
            check_names("name", std::slice::from_ref(name))?;
            check_word("owner", owner)?;
            check_word("state", state)?;
            check_user_data(user_data)?;
            if user_data.contains_key(LEASED_RESOURCES) {
                return Err(invalid(
                    &format!("user_data[{LEASED_RESOURCES}]"),
                    "kept by steward for virtual resources; an update cannot set it",
                ));
            }
        }
        PoolAction::Release { name, owner, dest } => {
            check_names("name", std::slice::from_ref(name))?;
            check_word("owner", owner)?;
            check_word("dest", dest)?;
        }
        PoolAction::Reset { names, dest } => {
            check_names("names", names)?;
            check_word("dest", dest)?;
        }
        PoolAction::Sync {
            entries,
            expiry_ms,
            dynamic,
        } => {
            let static_types = entries.iter().map(|e| e.rtype.as_str()).collect();
            dynamic::check_dynamic(dynamic, &static_types)?;
            if entries.len() > POOL_ITEMS_MAX {
                return Err(Rejection::TooLarge {
                    field: "resources".to_string(),
                    rule: format!(
                        "{} resources, more than POOL_ITEMS_MAX = {POOL_ITEMS_MAX}",
                        entries.len()
                    ),
                });
            }
            let mut seen = std::collections::BTreeSet::new();
            for (i, e) in entries.iter().enumerate() {
                let f = format!("resources[{i}]");
                check_names(&format!("{f}.name"), std::slice::from_ref(&e.name))?;
                check_word(&format!("{f}.type"), &e.rtype)?;
                check_word(&format!("{f}.state"), &e.state)?;
                if !seen.insert(&e.name) {
                    return Err(invalid(&f, format!("{} is named twice", e.name)));
                }
            }
            for (rtype, states) in expiry_ms {
                check_word("expiry.type", rtype)?;
                for state in states.keys() {
                    check_word("expiry.state", state)?;
                }
            }
        }
        PoolAction::SyncVirtual { configs } => mason::check_configs(configs)?,
        PoolAction::Reconcile => {}
        PoolAction::Constructed { name } => check_names("name", std::slice::from_ref(name))?,
    }
    Ok(())
}
