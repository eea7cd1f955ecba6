//! Format 1 is read as the format-2 command it names; format 2 is what is written.

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
    let proposal = crate::Proposal::new(5, None, None, MemberCommand::Retire { node_id: 1 }.into());
    assert_eq!(
        serde_json::to_string(&proposal).expect("write"),
        r#"{"time_ms":5,"command":{"members":{"Retire":{"node_id":1}}}}"#
    );
    assert_eq!(LOG_FORMAT, 2);
}

/// Format-1 entries written by the format-1 serializer itself (commit 7faeb11), one or more
/// per command variant, with the fields set to values a real cluster would write. How the
/// file was made, and the generator's code: `format/README.md`.
const V1_GOLDEN: &str = include_str!("v1_golden.jsonl");

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
