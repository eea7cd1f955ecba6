//! Counting objects of a kind by a label's value or a status field's value: Service Fabrik's
//! state labels, pools by state, deployments by AppContext state.
//!
//! `LabelCounts` keeps, for every (kind, label key), how many objects carry each value, in step
//! with every object change (like `ReservationIndex`: derived from the objects, never
//! snapshotted, rebuilt on restore). A count by label over a whole kind is read from it in
//! O(distinct values). A count within one namespace, under a label selector, or by a status field
//! ranges over that kind's objects (O(objects of the kind), never the whole store).

use std::collections::BTreeMap;

use compact_str::CompactString;

use crate::objects::resource::Resource;
use crate::rejection::Rejection;

/// Most distinct values one count answers.
pub const COUNT_BUCKETS_MAX: usize = 10_000;

/// Longest status path, in segments.
pub const COUNT_PATH_SEGMENTS_MAX: usize = 16;

/// What to count by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountBy {
    /// The value of this label; objects without it count as missing.
    Label(String),
    /// The value at this path in `status` (`status:phase`, `status:lock.type`): a string counts
    /// by itself, a number or boolean by its JSON text; anything else, or nothing, as missing.
    Status(Vec<String>),
}

impl CountBy {
    /// Parses `label:KEY` or `status:PATH` (PATH dotted). Errors name the field `by`.
    pub fn parse(text: &str) -> Result<CountBy, Rejection> {
        let invalid = |rule: String| Rejection::Invalid {
            field: "by".to_string(),
            rule,
        };
        match text.split_once(':') {
            Some(("label", key)) => {
                crate::objects::validate::validate_label_key("by", key)?;
                Ok(CountBy::Label(key.to_string()))
            }
            Some(("status", path)) => {
                let segments: Vec<String> = path.split('.').map(str::to_string).collect();
                if segments.iter().any(String::is_empty) {
                    return Err(invalid(format!(
                        "status path {path:?} has an empty segment; write status:a.b.c"
                    )));
                }
                if segments.len() > COUNT_PATH_SEGMENTS_MAX {
                    return Err(invalid(format!(
                        "status path {path:?} has {} segments, more than \
                         COUNT_PATH_SEGMENTS_MAX = {COUNT_PATH_SEGMENTS_MAX}",
                        segments.len()
                    )));
                }
                Ok(CountBy::Status(segments))
            }
            _ => Err(invalid(format!(
                "{text:?} is neither label:KEY nor status:PATH (e.g. label:state, status:state)"
            ))),
        }
    }

    /// The value `object` counts under, `None` for missing.
    pub fn value_of(&self, object: &Resource) -> Option<String> {
        match self {
            CountBy::Label(key) => object.metadata.labels.get(key).cloned(),
            CountBy::Status(path) => {
                let mut v = &object.status;
                for segment in path {
                    v = v.get(segment.as_str())?;
                }
                match v {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Number(n) => Some(n.to_string()),
                    serde_json::Value::Bool(b) => Some(b.to_string()),
                    _ => None,
                }
            }
        }
    }
}

/// A count's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Objects counted (in the kind, namespace and selector).
    pub total: u64,
    /// Objects per value, in value order.
    pub buckets: BTreeMap<String, u64>,
    /// Objects without a value.
    pub missing: u64,
}

impl Counts {
    /// Adds one object with `value`; `TooLarge` past `COUNT_BUCKETS_MAX` distinct values.
    pub(crate) fn add(&mut self, value: Option<String>) -> Result<(), Rejection> {
        self.total += 1;
        let Some(value) = value else {
            self.missing += 1;
            return Ok(());
        };
        if let Some(n) = self.buckets.get_mut(&value) {
            *n += 1;
            return Ok(());
        }
        if self.buckets.len() == COUNT_BUCKETS_MAX {
            return Err(too_many());
        }
        self.buckets.insert(value, 1);
        Ok(())
    }
}

fn too_many() -> Rejection {
    Rejection::TooLarge {
        field: "by".to_string(),
        rule: format!(
            "more than COUNT_BUCKETS_MAX = {COUNT_BUCKETS_MAX} distinct values; count by a \
             field with fewer values"
        ),
    }
}

/// Per kind: the number of objects, and per label key the number of objects per value.
/// Persistent maps, so cloning the state for a snapshot shares them instead of copying.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelCounts {
    kinds: imbl::OrdMap<CompactString, KindCounts>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct KindCounts {
    objects: u64,
    labels: imbl::OrdMap<String, imbl::OrdMap<String, u64>>,
}

impl LabelCounts {
    /// Keeps the counts in step with one object change (`before` -> `after`, same key).
    pub fn replace(&mut self, before: Option<&Resource>, after: Option<&Resource>) {
        if let Some(old) = before {
            let mut empty = false;
            if let Some(k) = self.kinds.get_mut(old.kind.as_str()) {
                k.objects = k.objects.saturating_sub(1);
                for (key, value) in &old.metadata.labels {
                    let mut gone = false;
                    if let Some(values) = k.labels.get_mut(key) {
                        if let Some(n) = values.get_mut(value) {
                            *n = n.saturating_sub(1);
                            if *n == 0 {
                                values.remove(value);
                            }
                        }
                        gone = values.is_empty();
                    }
                    if gone {
                        k.labels.remove(key);
                    }
                }
                empty = k.objects == 0;
            }
            if empty {
                self.kinds.remove(old.kind.as_str());
            }
        }
        if let Some(new) = after {
            if !self.kinds.contains_key(new.kind.as_str()) {
                self.kinds.insert(new.kind.clone(), KindCounts::default());
            }
            if let Some(k) = self.kinds.get_mut(new.kind.as_str()) {
                k.objects += 1;
                for (key, value) in &new.metadata.labels {
                    if !k.labels.contains_key(key) {
                        k.labels.insert(key.clone(), imbl::OrdMap::new());
                    }
                    if let Some(values) = k.labels.get_mut(key) {
                        let n = values.get(value).copied().unwrap_or(0);
                        values.insert(value.clone(), n + 1);
                    }
                }
            }
        }
    }

    /// Every kind with its number of objects, in kind order.
    pub fn kinds(&self) -> impl Iterator<Item = (&str, u64)> {
        self.kinds
            .iter()
            .map(|(kind, k)| (kind.as_str(), k.objects))
    }

    /// The count of a whole kind by label `key`, from the kept counts.
    pub fn by_label(&self, kind: &str, key: &str) -> Result<Counts, Rejection> {
        let Some(k) = self.kinds.get(kind) else {
            return Ok(Counts::default());
        };
        let Some(values) = k.labels.get(key) else {
            return Ok(Counts {
                total: k.objects,
                missing: k.objects,
                buckets: BTreeMap::new(),
            });
        };
        if values.len() > COUNT_BUCKETS_MAX {
            return Err(too_many());
        }
        let buckets: BTreeMap<String, u64> = values.iter().map(|(v, n)| (v.clone(), *n)).collect();
        let labelled: u64 = buckets.values().sum();
        Ok(Counts {
            total: k.objects,
            missing: k.objects.saturating_sub(labelled),
            buckets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(
        kind: &str,
        name: &str,
        labels: &[(&str, &str)],
        status: serde_json::Value,
    ) -> Resource {
        let mut r = Resource::new("v1", kind, "default", name);
        r.metadata.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        r.status = status;
        r
    }

    #[test]
    fn parse_takes_label_and_status_paths_and_names_the_field_when_wrong() {
        assert_eq!(
            CountBy::parse("label:state"),
            Ok(CountBy::Label("state".into()))
        );
        assert_eq!(
            CountBy::parse("status:lock.type"),
            Ok(CountBy::Status(vec!["lock".into(), "type".into()]))
        );
        for bad in [
            "state",
            "field:x",
            "label:",
            "label:a b",
            "status:",
            "status:a..b",
        ] {
            match CountBy::parse(bad) {
                Err(Rejection::Invalid { field, .. }) => assert_eq!(field, "by", "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let deep = format!("status:{}", vec!["a"; COUNT_PATH_SEGMENTS_MAX].join("."));
        assert!(CountBy::parse(&deep).is_ok());
        let deeper = format!(
            "status:{}",
            vec!["a"; COUNT_PATH_SEGMENTS_MAX + 1].join(".")
        );
        assert!(CountBy::parse(&deeper).is_err());
    }

    #[test]
    fn values_come_from_labels_or_status_scalars() {
        let o = object(
            "Director",
            "d",
            &[("state", "succeeded")],
            json!({"state": "in_progress", "n": 3, "ok": true, "lock": {"type": "READ"}, "list": [1]}),
        );
        let v = |by: &str| CountBy::parse(by).expect("by").value_of(&o);
        assert_eq!(v("label:state").as_deref(), Some("succeeded"));
        assert_eq!(v("label:other"), None);
        assert_eq!(v("status:state").as_deref(), Some("in_progress"));
        assert_eq!(v("status:n").as_deref(), Some("3"));
        assert_eq!(v("status:ok").as_deref(), Some("true"));
        assert_eq!(v("status:lock.type").as_deref(), Some("READ"));
        assert_eq!(v("status:list"), None);
        assert_eq!(v("status:lock"), None);
        assert_eq!(v("status:nope.deeper"), None);
    }

    #[test]
    fn label_counts_follow_every_change_and_equal_a_scan() {
        let mut index = LabelCounts::default();
        let a = object("Director", "a", &[("state", "in_queue")], json!(null));
        let b = object(
            "Director",
            "b",
            &[("state", "in_queue"), ("tier", "gold")],
            json!(null),
        );
        let c = object("Director", "c", &[], json!(null));
        let d = object("Docker", "d", &[("state", "deleted")], json!(null));
        for o in [&a, &b, &c, &d] {
            index.replace(None, Some(o));
        }
        let mut a2 = a.clone();
        a2.metadata
            .labels
            .insert("state".into(), "succeeded".into());
        index.replace(Some(&a), Some(&a2));
        index.replace(Some(&b), None);
        let got = index.by_label("Director", "state").expect("count");
        assert_eq!(
            got,
            Counts {
                total: 2,
                buckets: [("succeeded".to_string(), 1)].into(),
                missing: 1,
            }
        );
        let mut scan = Counts::default();
        for o in [&a2, &c] {
            scan.add(CountBy::Label("state".into()).value_of(o))
                .expect("add");
        }
        assert_eq!(got, scan);
        assert_eq!(index.by_label("Director", "tier").expect("tier").missing, 2);
        assert_eq!(
            index.by_label("Nothing", "state").expect("none"),
            Counts::default()
        );
        // Everything removed: nothing kept.
        for o in [&a2, &c, &d] {
            index.replace(Some(o), None);
        }
        assert_eq!(index, LabelCounts::default());
    }

    #[test]
    fn buckets_stop_at_their_limit() {
        let mut c = Counts::default();
        for i in 0..COUNT_BUCKETS_MAX {
            c.add(Some(format!("v{i}"))).expect("under the limit");
        }
        c.add(Some("v0".into()))
            .expect("a known value is no new bucket");
        c.add(None).expect("missing is no bucket");
        match c.add(Some("new".into())) {
            Err(Rejection::TooLarge { field, rule }) => {
                assert_eq!(field, "by");
                assert!(rule.contains("COUNT_BUCKETS_MAX"), "{rule}");
            }
            other => panic!("{other:?}"),
        }
    }
}
