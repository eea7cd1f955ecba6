//! `RawJson`: a JSON value kept as its canonical text (compact, object keys sorted), one
//! allocation, written out verbatim.
//!
//! An object's `spec` is opaque to steward: it is stored, compared, copied into the log, peer
//! messages, snapshots and API replies, and never looked into. Held as a parsed
//! `serde_json::Value`, a 256-byte one-key spec cost ~900 heap bytes (a map node is allocated at
//! full capacity) and every clone, encode and decode walked and re-escaped it. As text it costs its
//! length and serializes as a copy.
//!
//! Canonical means exactly what `serde_json::to_string(&Value)` produces: serde_json (built
//! without `preserve_order`) keeps object keys sorted, writes no whitespace and prints each number
//! one way. Two canonical texts are equal exactly when their values are, which `apply` relies on to
//! tell whether a spec changed. (One harmless exception: `-0.0` and `0.0` print differently where
//! `Value` called them equal, so such an edit now counts as a change.) Every spec in existing logs
//! and snapshots was serialized from a `Value`, so it is already canonical.
//!
//! Who canonicalizes: untrusted text (a client's object) goes through [`RawJson::canonical`] once,
//! in `Resource::from_json`; code builds values with [`RawJson::from_value`]. `Deserialize` takes
//! the text as it comes, because everything it reads (log, snapshots, peer messages) was
//! canonical when written. `Serialize` emits the text as is, which only serde_json understands:
//! another format (YAML) must go through `serde_json::Value` first.
//!
//! The text is shared (`Arc`): a write's object is cloned on its way through a node (the
//! command kept to resend, the proposal, the log tail's entry handed to replication and to
//! apply, the stored object), and each clone of a `Box` copied the whole spec. Shared, the
//! store's object and the log's entry hold one copy between them, and `null` (an absent
//! status) is one allocation per process.

use std::fmt;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON value as its canonical text. Equality is text equality, hence value equality.
#[derive(Clone, Serialize)]
#[serde(transparent)]
pub struct RawJson(Arc<RawValue>);

/// The text as read; a `null` (the status of most objects, on every follower and after every
/// restart) becomes the shared one.
impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawJson, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(if raw.get() == "null" {
            RawJson::null()
        } else {
            RawJson(Arc::from(raw))
        })
    }
}

/// The one `null` of this process.
static NULL: LazyLock<RawJson> = LazyLock::new(|| RawJson(Arc::from(RawValue::NULL.to_owned())));

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for RawJson {}

impl RawJson {
    /// The text `null`: an absent spec.
    pub fn null() -> RawJson {
        NULL.clone()
    }

    /// The canonical text of a value built in code.
    pub fn from_value(value: &Value) -> RawJson {
        // Serializing a `Value` cannot fail (its map keys are strings), and its text is valid
        // JSON; the fallback only keeps this function total.
        serde_json::value::to_raw_value(value)
            .map(|raw| RawJson(Arc::from(raw)))
            .unwrap_or_else(|_| RawJson::null())
    }

    /// Parses untrusted JSON text and re-serializes it canonically. Fails on invalid JSON or
    /// nesting deeper than serde_json's limit (128), as parsing into a `Value` always did.
    pub fn canonical(text: &str) -> Result<RawJson, serde_json::Error> {
        let mut value: Value = serde_json::from_str(text)?;
        // A no-op unless some crate turns on serde_json's `preserve_order`; then it keeps the
        // text canonical all the same.
        value.sort_all_objects();
        Ok(RawJson::from_value(&value))
    }

    /// This text, canonicalized (see [`RawJson::canonical`]).
    pub fn canonicalize(self) -> Result<RawJson, serde_json::Error> {
        RawJson::canonical(self.as_str())
    }

    /// Whether the value is `null`.
    pub fn is_null(&self) -> bool {
        self.as_str() == "null"
    }

    /// Whether the value is an object. The text is valid JSON without leading whitespace (raw
    /// values are trimmed when read), so its first byte says.
    pub fn is_object(&self) -> bool {
        self.as_str().starts_with('{')
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// Length of the JSON text in bytes.
    pub fn len(&self) -> usize {
        self.as_str().len()
    }

    /// Whether the text is empty: never, a JSON value has at least one character. Here because a
    /// type with `len` is expected to have it.
    pub fn is_empty(&self) -> bool {
        self.as_str().is_empty()
    }

    /// The parsed value, for code that reads inside. The text is valid JSON at most 128 levels
    /// deep (`canonical` refuses deeper input, and `Value`s built in code are shallow), so parsing
    /// does not fail; were it to, the answer is `null` rather than a panic.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.as_str()).unwrap_or(Value::Null)
    }
}

impl Default for RawJson {
    fn default() -> RawJson {
        RawJson::null()
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RawJson")
            .field(&format_args!("{}", self.as_str()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canonical(text: &str) -> String {
        RawJson::canonical(text)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .as_str()
            .to_string()
    }

    #[test]
    fn canonical_text_is_compact_with_sorted_keys() {
        for (input, want) in [
            (r#"{"b":1, "a":2}"#, r#"{"a":2,"b":1}"#),
            (
                " {\n  \"z\" : [ 1 , {\"y\":null,\"x\":true} ],\n  \"a\": {} }\t",
                r#"{"a":{},"z":[1,{"x":true,"y":null}]}"#,
            ),
            (r#"{"B":1,"a":2,"A":3}"#, r#"{"A":3,"B":1,"a":2}"#),
            ("null", "null"),
            ("[]", "[]"),
            (r#""text""#, r#""text""#),
        ] {
            assert_eq!(canonical(input), want, "{input}");
        }
    }

    #[test]
    fn numbers_are_printed_as_serde_json_prints_them() {
        for (input, want) in [
            ("1", "1"),
            ("-7", "-7"),
            ("1.0", "1.0"),
            ("1e2", "100.0"),
            ("1E+2", "100.0"),
            ("2.50", "2.5"),
            ("-0", "-0.0"),
            ("0.0", "0.0"),
            ("18446744073709551615", "18446744073709551615"),
            ("18446744073709551616", "1.8446744073709552e+19"),
            ("1.5e-7", "1.5e-7"),
        ] {
            assert_eq!(canonical(input), want, "{input}");
        }
    }

    #[test]
    fn strings_are_unescaped_and_escaped_one_way() {
        for (input, want) in [
            (r#""\u00e9""#, "\"\u{e9}\""),
            (r#""\ud83d\ude00""#, "\"\u{1F600}\""),
            (r#""a\/b""#, r#""a/b""#),
            (r#""\u0001\u001f""#, r#""\u0001\u001f""#),
            (r#""tab\there""#, r#""tab\there""#),
            (r#""q\"\\""#, r#""q\"\\""#),
            (r#"{"\u0062":1,"a":2}"#, r#"{"a":2,"b":1}"#),
        ] {
            assert_eq!(canonical(input), want, "{input}");
        }
    }

    #[test]
    fn canonical_text_is_what_a_value_serializes_to() {
        let value = json!({"z": [1, 2.5, "é", null], "a": {"c": true, "b": -3}});
        let raw = RawJson::from_value(&value);
        assert_eq!(raw.as_str(), serde_json::to_string(&value).expect("ser"));
        assert_eq!(RawJson::canonical(raw.as_str()).expect("parses"), raw);
        assert_eq!(raw.to_value(), value);
        assert_eq!(raw.len(), raw.as_str().len());
        assert!(!raw.is_empty());
    }

    #[test]
    fn invalid_or_too_deep_text_is_refused() {
        for text in ["", "{", r#"{"a":}"#, "nul", "1 2", r#"{"a":1,}"#] {
            assert!(RawJson::canonical(text).is_err(), "{text:?}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(RawJson::canonical(&deep).is_err());
    }

    #[test]
    fn equal_values_have_equal_text_and_different_values_do_not() {
        let a = RawJson::canonical(r#"{ "a": 1, "b": [true] }"#).expect("a");
        let b = RawJson::canonical(r#"{"b":[true],"a":1}"#).expect("b");
        assert_eq!(a, b);
        for other in [
            r#"{"a":1.0,"b":[true]}"#,
            r#"{"a":1,"b":[false]}"#,
            r#"{"a":1}"#,
        ] {
            assert_ne!(a, RawJson::canonical(other).expect("other"), "{other}");
        }
    }

    #[test]
    fn kind_accessors() {
        assert!(RawJson::null().is_null());
        assert!(RawJson::default().is_null());
        assert!(!RawJson::null().is_object());
        let object = RawJson::canonical(" { } ").expect("object");
        assert_eq!(object.as_str(), "{}");
        assert!(object.is_object() && !object.is_null());
        for text in ["[]", "\"{\"", "1", "true"] {
            let raw = RawJson::canonical(text).expect("parses");
            assert!(!raw.is_object() && !raw.is_null(), "{text}");
        }
    }

    #[test]
    fn serializes_verbatim_and_deserializes_as_is() {
        let raw = RawJson::canonical(r#"{"b":"x","a":[1,2]}"#).expect("parses");
        let bytes = serde_json::to_vec(&raw).expect("ser");
        assert_eq!(bytes, br#"{"a":[1,2],"b":"x"}"#);
        let back: RawJson = serde_json::from_slice(&bytes).expect("de");
        assert_eq!(back, raw);
        // Deserialize trusts its input: whitespace is kept until canonicalized.
        let loose: RawJson = serde_json::from_str(r#" { "b" : 1 } "#).expect("de");
        assert_eq!(loose.as_str(), r#"{ "b" : 1 }"#);
        assert_eq!(
            loose.canonicalize().expect("canonical").as_str(),
            r#"{"b":1}"#
        );
    }

    #[test]
    fn round_trips_through_value() {
        let raw = RawJson::canonical(r#"{"b":{"d":1,"c":null},"a":"é"}"#).expect("parses");
        let value = serde_json::to_value(&raw).expect("to_value");
        assert_eq!(value, json!({"a": "é", "b": {"c": null, "d": 1}}));
        let back: RawJson = serde_json::from_value(value).expect("from_value");
        assert_eq!(back, raw);
    }

    #[test]
    fn clones_share_the_text_and_encode_as_the_text() {
        let raw = RawJson::canonical(r#"{"data":"xyz"}"#).expect("parses");
        let copy = raw.clone();
        assert!(Arc::ptr_eq(&raw.0, &copy.0), "a clone copied the text");
        assert!(Arc::ptr_eq(&RawJson::null().0, &RawJson::default().0));
        // Shared or not, the encoding is the text itself, as before (log, snapshots, peers).
        assert_eq!(serde_json::to_string(&copy).unwrap(), r#"{"data":"xyz"}"#);
        let back: RawJson = serde_json::from_str(r#"{"data":"xyz"}"#).unwrap();
        assert_eq!(back, raw);
        let null: RawJson = serde_json::from_str("null").unwrap();
        assert!(
            Arc::ptr_eq(&null.0, &RawJson::null().0),
            "a decoded null was not shared"
        );
    }

    #[test]
    fn debug_shows_the_text() {
        let raw = RawJson::from_value(&json!({"a": 1}));
        assert_eq!(format!("{raw:?}"), r#"RawJson({"a":1})"#);
    }
}
