//! The objects users store: a Kubernetes-shaped `Resource` (kind, apiVersion, metadata, spec,
//! status), its `ObjectMeta`, the `ObjectKey` that names it, and their JSON form.
//!
//! Pure data and (de)serialization only; the rules an object must obey live in `validate.rs` and
//! the server-set metadata (uid, resourceVersion, generation, creationTimestamp) is written only by
//! `apply.rs`. The JSON form follows Kubernetes: `resourceVersion` is a decimal *string*, empty
//! fields are omitted, and an absent or empty namespace means `"default"`.

use std::collections::BTreeMap;
use std::fmt;

use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use crate::objects::compact::{StringMap, Uid};
use crate::objects::raw_json::RawJson;
use crate::rejection::Rejection;
use crate::reservations::Reservation;

/// The namespace an object lands in when its JSON names none (or names `""`).
pub const DEFAULT_NAMESPACE: &str = "default";

/// The identity of a stored object. Ordered by (kind, namespace, name), which is the order of the
/// state's `BTreeMap` and therefore of every list and page: keep the field order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// CamelCase kind, e.g. `Director`.
    pub kind: CompactString,
    /// DNS-1123 label, e.g. `default`.
    pub namespace: CompactString,
    /// DNS-1123 subdomain, unique within (kind, namespace).
    pub name: CompactString,
}

impl ObjectKey {
    /// Builds a key from its three parts (no validation; see `validate_key`).
    pub fn new(kind: &str, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// A stored object. `spec` is what the user wants, `status` what a controller observed; they are
/// written by different commands (`Update` vs `UpdateStatus`) so the two writers never clobber
/// each other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// CamelCase type name; part of the key. Defaulted to `""` on input so that validation, not
    /// the parser, reports it missing.
    #[serde(default)]
    pub kind: CompactString,
    /// `version` or `group/version`, e.g. `deployment.servicefabrik.io/v1alpha1`.
    #[serde(default)]
    pub api_version: CompactString,
    /// Identity and server-maintained bookkeeping.
    #[serde(default = "default_meta")]
    pub metadata: ObjectMeta,
    /// Desired state: a JSON object, or null when absent. Kept as canonical text because steward
    /// never looks inside: comparing, copying and writing it out are all it does (`RawJson`).
    #[serde(default, skip_serializing_if = "RawJson::is_null")]
    pub spec: RawJson,
    /// Observed state: a JSON object, or null when absent.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub status: serde_json::Value,
    /// Capacity this object holds on a node until it is decommissioned (see `reservations`).
    /// Boxed: most objects have none, and then it costs one pointer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<Box<Reservation>>,
}

/// Object metadata, Kubernetes style. Unknown input fields (e.g. `selfLink`) are ignored.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectMeta {
    /// DNS-1123 subdomain; part of the key.
    pub name: CompactString,
    /// DNS-1123 label; part of the key. `""`, null or absent on input becomes `"default"`.
    #[serde(default = "default_namespace", deserialize_with = "de_namespace")]
    pub namespace: CompactString,
    /// Set once at creation from the log position; unique over the life of the store.
    #[serde(skip_serializing_if = "Uid::is_empty")]
    pub uid: Uid,
    /// Store revision of the last change to this object; a JSON string on output ("60603"), a
    /// string or a number on input, `""`/absent meaning 0 (not yet stored).
    #[serde(with = "revision_string", skip_serializing_if = "is_zero")]
    pub resource_version: u64,
    /// 1 at creation, +1 for each update that changes `spec`.
    #[serde(skip_serializing_if = "is_zero")]
    pub generation: u64,
    /// RFC 3339 seconds (`2018-07-25T11:29:01Z`) from the leader time of the creating entry.
    #[serde(skip_serializing_if = "CompactString::is_empty")]
    pub creation_timestamp: CompactString,
    /// Selectable key/value pairs.
    #[serde(
        skip_serializing_if = "StringMap::is_empty",
        deserialize_with = "de_null_default"
    )]
    pub labels: StringMap,
    /// Free-form key/value pairs, not selectable.
    #[serde(
        skip_serializing_if = "StringMap::is_empty",
        deserialize_with = "de_null_default"
    )]
    pub annotations: StringMap,
}

impl Resource {
    /// A bare object with null spec and status, for callers that build objects in code.
    pub fn new(api_version: &str, kind: &str, namespace: &str, name: &str) -> Resource {
        Resource {
            kind: kind.into(),
            api_version: api_version.into(),
            metadata: ObjectMeta {
                name: name.into(),
                namespace: namespace.into(),
                ..ObjectMeta::default()
            },
            spec: RawJson::null(),
            status: serde_json::Value::Null,
            reservation: None,
        }
    }

    /// Parses a user-supplied JSON object. Only the syntax is checked here (`validate_object`
    /// checks the rules); the namespace is defaulted to `"default"`. The spec is canonicalized
    /// here, the one place client text enters, so that equal specs are equal text in every
    /// command, log entry and replica.
    pub fn from_json(text: &str) -> Result<Resource, Rejection> {
        let invalid = |rule: String| Rejection::Invalid {
            field: "body".to_string(),
            rule,
        };
        // serde also accepts a struct written as a JSON array; users must send an object.
        if !text.trim_start().starts_with('{') {
            return Err(invalid("must be a JSON object".to_string()));
        }
        let mut obj: Resource = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        crate::objects::validate::check_json_depth("body", text)?;
        obj.spec = obj.spec.canonicalize().map_err(|e| Rejection::Invalid {
            field: "spec".to_string(),
            rule: e.to_string(),
        })?;
        Ok(obj)
    }

    /// Compact JSON, fields in the order kind, apiVersion, metadata, spec, status.
    pub fn to_json(&self) -> String {
        // Serializing this type cannot fail: every map key is a String and no impl errors.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// About the length of this object as compact JSON, without writing it: exact for the spec
    /// (kept as text), counted for the status, estimated for the metadata. For memory budgets
    /// (the watch history), not for limits a client is held to.
    pub fn approx_json_bytes(&self) -> usize {
        const FRAME: usize = 160; // field names, quotes, numbers, the timestamp
        let m = &self.metadata;
        let map = |map: &BTreeMap<String, String>| -> usize {
            map.iter().map(|(k, v)| k.len() + v.len() + 6).sum()
        };
        let status = if self.status.is_null() {
            0
        } else {
            crate::objects::validate::json_len(&self.status)
        };
        let reservation = match &self.reservation {
            Some(r) => 120 + r.node_id.len(),
            None => 0,
        };
        FRAME
            + self.kind.len()
            + self.api_version.len()
            + m.name.len()
            + m.namespace.len()
            + m.uid.len()
            + map(&m.labels)
            + map(&m.annotations)
            + self.spec.len()
            + status
            + reservation
    }

    /// The key this object is stored under.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            kind: self.kind.clone(),
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
        }
    }
}

fn default_namespace() -> CompactString {
    CompactString::const_new(DEFAULT_NAMESPACE)
}

fn default_meta() -> ObjectMeta {
    ObjectMeta {
        namespace: default_namespace(),
        ..ObjectMeta::default()
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn de_namespace<'de, D: Deserializer<'de>>(d: D) -> Result<CompactString, D::Error> {
    let ns = Option::<CompactString>::deserialize(d)?.unwrap_or_default();
    Ok(if ns.is_empty() {
        default_namespace()
    } else {
        ns
    })
}

fn de_null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `resourceVersion` as Kubernetes writes it: a decimal string. Accepts a string, a number, or
/// null on input.
mod revision_string {
    use super::*;
    use serde::de::{self, Visitor};

    pub fn serialize<S: Serializer>(rv: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(rv)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(RevisionVisitor)
    }

    struct RevisionVisitor;

    impl<'de> Visitor<'de> for RevisionVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a resourceVersion: a decimal string or a non-negative integer")
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom("resourceVersion must not be negative"))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            if v.is_empty() {
                return Ok(0);
            }
            if !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(E::custom(format!(
                    "resourceVersion {v:?} must be a decimal number"
                )));
            }
            v.parse()
                .map_err(|_| E::custom(format!("resourceVersion {v:?} is out of range")))
        }

        fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }

        fn visit_none<E: de::Error>(self) -> Result<u64, E> {
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Director example from the seed document, trimmed.
    const DIRECTOR: &str = r#"{
      "kind": "Director",
      "apiVersion": "deployment.servicefabrik.io/v1alpha1",
      "metadata": {
        "name": "55ac1af2-abcd-4541-ae78-abcdefgh8d94",
        "namespace": "default",
        "selfLink": "/apis/deployment.servicefabrik.io/v1alpha1/namespaces/default/directors/x",
        "uid": "eda66a0b-abcd-11e8-b417-abcdefgh13dc",
        "resourceVersion": "60603",
        "generation": 1,
        "creationTimestamp": "2018-07-25T11:29:01Z",
        "labels": { "state": "in_queue", "instance_guid": "55ac1af2" }
      },
      "spec": { "options": "{}" },
      "status": { "state": "in_queue", "lastOperation": "created", "response": "{}" }
    }"#;

    #[test]
    fn parses_the_seed_director() {
        let r = Resource::from_json(DIRECTOR).expect("parses");
        assert_eq!(r.kind, "Director");
        assert_eq!(r.api_version, "deployment.servicefabrik.io/v1alpha1");
        assert_eq!(r.metadata.resource_version, 60603);
        assert_eq!(r.metadata.generation, 1);
        assert_eq!(r.metadata.labels["state"], "in_queue");
        assert_eq!(r.spec.as_str(), r#"{"options":"{}"}"#);
        assert_eq!(
            r.key().to_string(),
            "Director/default/55ac1af2-abcd-4541-ae78-abcdefgh8d94"
        );
    }

    #[test]
    fn json_round_trips_with_kubernetes_shape() {
        let r = Resource::from_json(DIRECTOR).expect("parses");
        let text = r.to_json();
        assert!(
            text.starts_with(r#"{"kind":"Director","apiVersion":"#),
            "{text}"
        );
        assert!(text.contains(r#""resourceVersion":"60603""#), "{text}");
        assert!(!text.contains("selfLink"), "{text}");
        assert_eq!(Resource::from_json(&text).expect("reparses"), r);
    }

    #[test]
    fn the_spec_is_canonicalized_on_input() {
        let a = Resource::from_json(
            r#"{"kind":"K","metadata":{"name":"a"},"spec":{ "b": 1.0, "a": {"d":"\u00e9","c":[ 1e2 ]} }}"#,
        )
        .expect("parses");
        assert_eq!(a.spec.as_str(), r#"{"a":{"c":[100.0],"d":"é"},"b":1.0}"#);
        let b = Resource::from_json(
            r#"{"kind":"K","metadata":{"name":"a"},"spec":{"a":{"c":[100.0],"d":"é"},"b":1.0}}"#,
        )
        .expect("parses");
        assert_eq!(a, b);
        let text = a.to_json();
        assert!(
            text.ends_with(r#","spec":{"a":{"c":[100.0],"d":"é"},"b":1.0}}"#),
            "{text}"
        );
    }

    #[test]
    fn a_spec_nested_too_deep_is_invalid() {
        let spec = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let text = format!(r#"{{"kind":"K","metadata":{{"name":"a"}},"spec":{spec}}}"#);
        match Resource::from_json(&text) {
            Err(Rejection::Invalid { field, rule }) => {
                assert_eq!(
                    (field.as_str(), rule.contains("JSON_DEPTH_MAX")),
                    ("body", true)
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn json_api_shape_is_kept_with_and_without_spec() {
        let mut r = Resource::new("v1", "K", "default", "a");
        r.metadata.resource_version = 7;
        r.status = serde_json::json!({"ok": true});
        assert_eq!(
            r.to_json(),
            r#"{"kind":"K","apiVersion":"v1","metadata":{"name":"a","namespace":"default","resourceVersion":"7"},"status":{"ok":true}}"#
        );
        r.spec = RawJson::from_value(&serde_json::json!({"z": 1, "a": [true, null]}));
        let text = r.to_json();
        assert_eq!(
            text,
            r#"{"kind":"K","apiVersion":"v1","metadata":{"name":"a","namespace":"default","resourceVersion":"7"},"spec":{"a":[true,null],"z":1},"status":{"ok":true}}"#
        );
        assert_eq!(Resource::from_json(&text).expect("reparses"), r);
        let from_bytes: Resource = serde_json::from_slice(text.as_bytes()).expect("de");
        assert_eq!(from_bytes, r);
    }

    #[test]
    fn round_trips_through_a_json_value() {
        let r = Resource::from_json(DIRECTOR).expect("parses");
        let value = serde_json::to_value(&r).expect("to_value");
        assert_eq!(value["spec"], serde_json::json!({"options": "{}"}));
        assert_eq!(
            value,
            serde_json::from_str::<serde_json::Value>(&r.to_json()).expect("json")
        );
        let back: Resource = serde_json::from_value(value).expect("from_value");
        assert_eq!(back, r);
        let bare = Resource::new("v1", "K", "default", "a");
        let value = serde_json::to_value(&bare).expect("to_value");
        assert!(value.get("spec").is_none(), "{value}");
        let back: Resource = serde_json::from_value(value).expect("from_value");
        assert!(back.spec.is_null());
    }

    #[test]
    fn empty_fields_are_omitted() {
        let r = Resource::new("v1", "Lock", "default", "a");
        assert_eq!(
            r.to_json(),
            r#"{"kind":"Lock","apiVersion":"v1","metadata":{"name":"a","namespace":"default"}}"#
        );
    }

    #[test]
    fn namespace_defaults_when_absent_empty_or_null() {
        for meta in [
            r#"{"name":"a"}"#,
            r#"{"name":"a","namespace":""}"#,
            r#"{"name":"a","namespace":null}"#,
        ] {
            let text = format!(r#"{{"kind":"K","apiVersion":"v1","metadata":{meta}}}"#);
            let r = Resource::from_json(&text).expect("parses");
            assert_eq!(r.metadata.namespace, "default", "{meta}");
        }
        let r = Resource::from_json(r#"{"kind":"K"}"#).expect("parses");
        assert_eq!(r.metadata.namespace, "default");
    }

    #[test]
    fn resource_version_accepts_string_number_empty_null() {
        for (rv, want) in [(r#""42""#, 42), ("42", 42), (r#""""#, 0), ("null", 0)] {
            let text = format!(r#"{{"metadata":{{"name":"a","resourceVersion":{rv}}}}}"#);
            let r = Resource::from_json(&text).expect("parses");
            assert_eq!(r.metadata.resource_version, want, "{rv}");
        }
    }

    #[test]
    fn bad_input_is_an_invalid_body() {
        for text in [
            "not json",
            r#"{"metadata":{"resourceVersion":"12a"}}"#,
            r#"{"metadata":{"resourceVersion":-1}}"#,
            r#"{"metadata":{"resourceVersion":"99999999999999999999"}}"#,
            r#"{"metadata":{"labels":{"a":1}}}"#,
            "[]",
        ] {
            match Resource::from_json(text) {
                Err(Rejection::Invalid { field, rule }) => {
                    assert_eq!(field, "body");
                    assert!(!rule.is_empty());
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn null_labels_and_missing_kind_parse_for_validation_to_judge() {
        let r = Resource::from_json(r#"{"metadata":{"name":"a","labels":null}}"#).expect("parses");
        assert!(r.metadata.labels.is_empty());
        assert_eq!(r.kind, "");
        assert!(r.spec.is_null());
    }

    #[test]
    fn keys_order_by_kind_then_namespace_then_name() {
        let mut keys = [
            ObjectKey::new("B", "a", "a"),
            ObjectKey::new("A", "b", "a"),
            ObjectKey::new("A", "a", "b"),
            ObjectKey::new("A", "a", "a"),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["A/a/a", "A/a/b", "A/b/a", "B/a/a"]);
    }
}
