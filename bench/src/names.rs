//! Names and bodies of what a run writes. Pure: no I/O.
//!
//! Every run works in its own namespace (`bench-<run>`), so runs against the same cluster never
//! collide and a list scans only its own run's objects (objects are kept in (kind, namespace,
//! name) order). Lock names and holders carry the run id for the same reason.

use std::time::{SystemTime, UNIX_EPOCH};

/// The kind of every object a run writes.
pub const KIND: &str = "Bench";
pub const API_VERSION: &str = "bench.steward.io/v1";
/// The label the `list` workload selects on, and its value on the listed objects.
pub const LIST_LABEL: (&str, &str) = ("bench-set", "listed");
/// Objects the `list` workload pre-creates with [`LIST_LABEL`], and without it.
pub const LIST_MATCHING: usize = 100;
pub const LIST_OTHERS: usize = 100;
/// The object the `watch` writer creates first; watchers watch from its revision.
pub const WATCH_MARKER: &str = "marker";
/// Lock TTL: a run that dies leaves no lock held for long.
pub const LOCK_TTL_MS: u64 = 60_000;
/// How long a `lock-contended` client waits in line before Aborted, LOCK_WAIT_EXPIRED.
pub const LOCK_WAIT_MS: u64 = 60_000;

/// Keys each etcd `txn` client writes in one Txn: a transaction over several keys (as many
/// compares and Puts, or Ranges), still a small request.
pub const TXN_KEYS: usize = 2;
/// TTL of the lease each etcd `lease-keep-alive` client keeps alive, in seconds (etcd's unit):
/// a run that dies leaves no lease for long.
pub const LEASE_TTL_S: i64 = 60;

/// A short id that tells this run from the others on the same cluster: 8 hex digits from the
/// time and the process id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunId(String);

impl RunId {
    pub fn new() -> RunId {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        RunId::from_parts(nanos, std::process::id())
    }

    pub fn from_parts(nanos: u64, pid: u32) -> RunId {
        // Mix so that two runs a few nanoseconds apart, or in two processes, still differ.
        let x = (nanos ^ (u64::from(pid) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        RunId(format!("{:08x}", x >> 32))
    }

    pub fn namespace(&self) -> String {
        format!("bench-{}", self.0)
    }

    /// A client's own lock (`lock`), or the one lock every client shares (`lock-contended`).
    pub fn lock_name(&self, client: Option<usize>) -> String {
        match client {
            Some(c) => format!("bench-{}-{c}", self.0),
            None => format!("bench-{}", self.0),
        }
    }

    pub fn holder(&self, client: usize) -> String {
        format!("bench-{}-{client}", self.0)
    }
}

impl Default for RunId {
    fn default() -> Self {
        RunId::new()
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The `seq`-th object client `client` creates (`create`).
pub fn created_name(client: usize, seq: u64) -> String {
    format!("c{client}-{seq}")
}

/// The object client `client` updates or reads (`update`, `get`, `get-serializable`).
pub fn own_name(client: usize) -> String {
    format!("c{client}")
}

/// The `i`-th of the [`TXN_KEYS`] objects client `client` writes in each of its Txns (`txn`).
pub fn txn_name(client: usize, i: usize) -> String {
    format!("t{client}-{i}")
}

/// The `i`-th object pre-created for `list`, and whether it carries [`LIST_LABEL`].
pub fn list_object(i: usize) -> (String, bool) {
    (format!("l{i}"), i < LIST_MATCHING)
}

/// The `seq`-th object the `watch` writer creates.
pub fn watch_name(seq: u64) -> String {
    format!("w{seq}")
}

/// The label selector of the `list` workload.
pub fn list_selector() -> String {
    format!("{}={}", LIST_LABEL.0, LIST_LABEL.1)
}

/// An object whose spec is `{"data": "<value_size bytes>"}`, preceded by `"stamp": N` when
/// given: the `watch` writer's send time (microseconds since the run's start), or the `update`
/// client's sequence number (an update that changes nothing is a no-op that takes no revision).
pub fn object_json(
    namespace: &str,
    name: &str,
    labelled: bool,
    value_size: usize,
    stamp: Option<u64>,
) -> String {
    let labels = labels_json(labelled);
    let stamp = stamp
        .map(|n| format!(r#""stamp":{n},"#))
        .unwrap_or_default();
    // The names and labels are ours (checked by the tests below), so no escaping is needed.
    format!(
        r#"{{"kind":"{KIND}","apiVersion":"{API_VERSION}","metadata":{{"name":"{name}","namespace":"{namespace}"{labels}}},"spec":{{{stamp}"data":"{data}"}}}}"#,
        data = "x".repeat(value_size)
    )
}

/// The `,"labels":{...}` fragment of a listed object's metadata, or nothing.
fn labels_json(labelled: bool) -> String {
    if labelled {
        format!(r#","labels":{{"{}":"{}"}}"#, LIST_LABEL.0, LIST_LABEL.1)
    } else {
        String::new()
    }
}

/// The metadata steward's server sets on every object it stores (apply.rs): what turns the
/// document a client sends ([`object_json`]) into the document steward stores and returns
/// ([`stored_json`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMeta {
    /// UUID-shaped, 36 characters, as steward's.
    pub uid: String,
    pub resource_version: u64,
    pub generation: u64,
    /// RFC 3339 seconds (`2026-11-22T10:00:00Z`).
    pub creation_timestamp: String,
}

impl StoredMeta {
    /// A UUID-shaped uid from a client and a sequence number (distinct per client and seq, as a
    /// stored object's uid is distinct per object).
    pub fn new(client: usize, seq: u64, resource_version: u64, generation: u64) -> StoredMeta {
        StoredMeta {
            uid: format!(
                "{:08x}-0000-0000-{:04x}-{:012x}",
                client as u64 & 0xffff_ffff,
                seq >> 48,
                seq & 0xffff_ffff_ffff
            ),
            resource_version,
            generation,
            creation_timestamp: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        }
    }
}

/// The document steward stores for [`object_json`]`(namespace, name, labelled, value_size,
/// stamp)` once its server has set `meta`: byte for byte what a steward `get` returns (the
/// tests check it against steward's own types). The etcd workloads store this as the value, so
/// both systems hold, replicate and return the same bytes per object; the client fills in the
/// metadata, as a Kubernetes apiserver does before it writes to etcd.
pub fn stored_json(
    namespace: &str,
    name: &str,
    labelled: bool,
    value_size: usize,
    stamp: Option<u64>,
    meta: &StoredMeta,
) -> String {
    let labels = labels_json(labelled);
    // Steward keeps the spec as canonical JSON: keys sorted, so `data` comes before `stamp`.
    let stamp = stamp
        .map(|n| format!(r#","stamp":{n}"#))
        .unwrap_or_default();
    format!(
        r#"{{"kind":"{KIND}","apiVersion":"{API_VERSION}","metadata":{{"name":"{name}","namespace":"{namespace}","uid":"{uid}","resourceVersion":"{rv}","generation":{generation},"creationTimestamp":"{created}"{labels}}},"spec":{{"data":"{data}"{stamp}}}}}"#,
        uid = meta.uid,
        rv = meta.resource_version,
        generation = meta.generation,
        created = meta.creation_timestamp,
        data = "x".repeat(value_size)
    )
}

/// Whether a stored document (an etcd value) carries [`LIST_LABEL`]: the etcd `list` workload's
/// label filter, run in the bench client as a Kubernetes apiserver runs it over what it ranged.
pub fn has_list_label(stored: &[u8]) -> Result<bool, serde_json::Error> {
    let doc: Labelled = serde_json::from_slice(stored)?;
    Ok(doc.metadata.labels.get(LIST_LABEL.0).map(String::as_str) == Some(LIST_LABEL.1))
}

#[derive(serde::Deserialize)]
struct Labelled {
    metadata: LabelledMeta,
}

#[derive(serde::Deserialize)]
struct LabelledMeta {
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
}

/// The etcd key prefix of a run's keys: `/bench/<run>/`.
pub fn etcd_prefix(run: &RunId) -> String {
    format!("/bench/{}/", run.0)
}

/// The `i`-th key pre-created for `list` on etcd: all [`LIST_MATCHING`] + [`LIST_OTHERS`] under
/// [`etcd_list_prefix`], as steward's are all in one namespace; the label in the value tells
/// them apart (see [`has_list_label`]).
pub fn etcd_list_key(run: &RunId, i: usize) -> String {
    format!("{}{}", etcd_list_prefix(run), list_object(i).0)
}

/// The prefix the etcd `list` workload ranges over.
pub fn etcd_list_prefix(run: &RunId) -> String {
    format!("{}list/", etcd_prefix(run))
}

pub use steward::state::kv::prefix_end;

/// What a watcher needs of an event's object: its name and its stamp (the writer's send time).
#[derive(serde::Deserialize)]
struct Watched {
    metadata: WatchedMeta,
    spec: WatchedSpec,
}

#[derive(serde::Deserialize)]
struct WatchedMeta {
    name: String,
}

#[derive(serde::Deserialize)]
struct WatchedSpec {
    stamp: Option<u64>,
}

/// The name and stamp (if any) of an object a watcher received.
pub fn watched(object_json: &str) -> Option<(String, Option<u64>)> {
    let w: Watched = serde_json::from_str(object_json).ok()?;
    Some((w.metadata.name, w.spec.stamp))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use steward::state::objects::validate::validate_object;
    use steward::state::{Resource, Selector};

    use super::*;

    fn valid(json: &str) -> Resource {
        let r = Resource::from_json(json).unwrap_or_else(|e| panic!("{json}: {e:?}"));
        validate_object(&r).unwrap_or_else(|e| panic!("{json}: {e:?}"));
        r
    }

    #[test]
    fn bodies_are_valid_objects_with_the_value_size() {
        let run = RunId::from_parts(1, 2);
        let ns = run.namespace();
        for size in [1, 256, 4096] {
            let r = valid(&object_json(&ns, &created_name(63, 9), false, size, None));
            assert_eq!(r.metadata.namespace, ns);
            assert_eq!(r.kind, KIND);
            assert_eq!(r.spec.to_value()["data"].as_str().unwrap().len(), size);
        }
        valid(&object_json(&ns, &own_name(0), false, 256, None));
        valid(&object_json(&ns, &watch_name(1), false, 256, Some(123)));
    }

    #[test]
    fn list_selector_matches_exactly_the_labelled_objects() {
        let ns = RunId::from_parts(1, 2).namespace();
        let selector = Selector::parse(&list_selector()).unwrap();
        let matching = (0..LIST_MATCHING + LIST_OTHERS)
            .map(list_object)
            .filter(|(name, labelled)| {
                let r = valid(&object_json(&ns, name, *labelled, 16, None));
                selector.matches(&r.metadata.labels)
            })
            .count();
        assert_eq!(matching, LIST_MATCHING);
    }

    #[test]
    fn names_are_distinct_per_client_and_seq() {
        let mut seen = BTreeSet::new();
        for c in 0..50 {
            for s in 0..50 {
                assert!(seen.insert(created_name(c, s)));
            }
            assert!(seen.insert(own_name(c)));
            for i in 0..TXN_KEYS {
                assert!(seen.insert(txn_name(c, i)));
            }
        }
        let run = RunId::from_parts(1, 2);
        assert_ne!(run.lock_name(Some(1)), run.lock_name(Some(2)));
        assert_ne!(run.lock_name(Some(1)), run.lock_name(None));
        assert_ne!(run.holder(1), run.holder(2));
    }

    #[test]
    fn run_ids_differ_across_time_and_processes() {
        let a = RunId::from_parts(1_000, 7);
        assert_ne!(a, RunId::from_parts(1_001, 7));
        assert_ne!(a, RunId::from_parts(1_000, 8));
        assert_eq!(a.to_string().len(), 8);
        valid(&object_json(&a.namespace(), "n", false, 1, None));
    }

    #[test]
    fn etcd_list_keys_and_range() {
        let run = RunId::from_parts(1, 2);
        let prefix = etcd_list_prefix(&run);
        let end = prefix_end(prefix.as_bytes());
        let in_range = |k: &String| k.as_bytes() >= prefix.as_bytes() && k.as_bytes() < &end[..];
        let keys: BTreeSet<String> = (0..LIST_MATCHING + LIST_OTHERS)
            .map(|i| etcd_list_key(&run, i))
            .collect();
        // All 200 are distinct and in the range, as all 200 steward objects are in the listed
        // namespace; nothing else the run writes is.
        assert_eq!(keys.len(), LIST_MATCHING + LIST_OTHERS);
        assert!(keys.iter().all(in_range));
        assert!(!in_range(&format!("{}{}", etcd_prefix(&run), own_name(0))));
        assert!(!in_range(&format!(
            "{}{}",
            etcd_prefix(&run),
            created_name(0, 0)
        )));
        assert!(etcd_list_key(&run, 0).starts_with(&etcd_prefix(&run)));
    }

    /// What steward's server makes of `object_json`: parsed and canonicalized by steward's own
    /// types, the server-set metadata filled in as apply.rs does, serialized as a get returns it.
    fn as_steward_stores(sent: &str, meta: &StoredMeta) -> String {
        let mut r = Resource::from_json(sent).unwrap();
        r.metadata.uid = meta.uid.as_str().into();
        r.metadata.resource_version = meta.resource_version;
        r.metadata.generation = meta.generation;
        r.metadata.creation_timestamp = meta.creation_timestamp.as_str().into();
        r.to_json()
    }

    #[test]
    fn etcd_values_are_the_documents_steward_stores() {
        let ns = RunId::from_parts(1, 2).namespace();
        let meta = StoredMeta::new(63, 1 << 50 | 7, 123_456, 2);
        assert_eq!(meta.uid.len(), 36, "{}", meta.uid);
        assert_eq!(meta.creation_timestamp.len(), 20);
        for (name, labelled, size, stamp) in [
            (created_name(63, 9), false, 256, None),
            (list_object(0).0, true, 16, None),
            (own_name(1), false, 4096, Some(42)),
        ] {
            let sent = object_json(&ns, &name, labelled, size, stamp);
            let stored = stored_json(&ns, &name, labelled, size, stamp, &meta);
            assert_eq!(stored, as_steward_stores(&sent, &meta));
            valid(&stored);
        }
        // A broken rendering is told apart: the spec's keys out of steward's order.
        let sent = object_json(&ns, "n", false, 8, Some(1));
        let unsorted = stored_json(&ns, "n", false, 8, None, &meta)
            .replace(r#"{"data""#, r#"{"stamp":1,"data""#);
        assert_ne!(unsorted, as_steward_stores(&sent, &meta));
    }

    #[test]
    fn the_label_filter_keeps_exactly_the_labelled_documents() {
        let ns = RunId::from_parts(1, 2).namespace();
        let meta = StoredMeta::new(0, 0, 1, 1);
        let kept = (0..LIST_MATCHING + LIST_OTHERS)
            .map(list_object)
            .filter(|(name, labelled)| {
                let doc = stored_json(&ns, name, *labelled, 32, None, &meta);
                has_list_label(doc.as_bytes()).unwrap()
            })
            .count();
        assert_eq!(kept, LIST_MATCHING);
        let other_value = br#"{"metadata":{"labels":{"bench-set":"other"}}}"#;
        assert!(!has_list_label(other_value).unwrap());
        assert!(has_list_label(b"not json").is_err());
    }

    #[test]
    fn watchers_read_name_and_send_time() {
        let json = object_json("ns", &watch_name(5), false, 64, Some(42));
        assert_eq!(watched(&json), Some(("w5".into(), Some(42))));
        let marker = object_json("ns", WATCH_MARKER, false, 1, None);
        assert_eq!(watched(&marker), Some((WATCH_MARKER.into(), None)));
        assert_eq!(watched("not json"), None);
    }
}
