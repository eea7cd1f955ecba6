use super::*;
use crate::command::{MemberCommand, ObjectCommand};
use crate::objects::resource::Resource;

fn create(name: &str) -> Command {
    Command::Objects(ObjectCommand::Create {
        object: Resource::new("v1", "Director", "default", name),
        fence: None,
    })
}

/// The text the derived `Serialize` of the four fields wrote before the text was kept.
fn fields_text(p: &Proposal) -> String {
    serde_json::to_string(&Fields {
        time_ms: p.time_ms,
        term: p.term,
        wall_ms: p.wall_ms,
        command: &p.command,
    })
    .expect("fields serialize")
}

#[test]
fn the_text_is_what_the_fields_serialize_to_with_and_without_the_optional_ones() {
    for (term, wall_ms) in [
        (None, None),
        (Some(3), None),
        (None, Some(9)),
        (Some(3), Some(9)),
    ] {
        let p = Proposal::new(5, term, wall_ms, create("x"));
        assert_eq!(serde_json::to_string(&p).expect("write"), fields_text(&p));
    }
    let p = Proposal::new(5, None, None, MemberCommand::Retire { node_id: 1 }.into());
    assert_eq!(
        serde_json::to_string(&p).expect("write"),
        r#"{"time_ms":5,"command":{"members":{"Retire":{"node_id":1}}}}"#
    );
}

#[test]
fn clones_share_the_text_written_once() {
    let p = Proposal::new(5, Some(2), Some(7), create("x"));
    let copy = p.clone();
    assert!(p.encoded.get().is_none());
    let written = serde_json::to_string(&copy).expect("write");
    let kept = p.encoded.get().expect("the original sees the clone's text");
    assert_eq!(kept.get(), written);
    // The same allocation, not an equal one.
    assert!(std::ptr::eq(kept.get(), copy.json().expect("json").get()));
    assert_eq!(serde_json::to_vec(&p).expect("again"), written.as_bytes());
}

#[test]
fn a_read_proposal_keeps_its_text_and_writes_it_back_unchanged() {
    let p = Proposal::new(11, Some(4), None, create("y"));
    let text = serde_json::to_string(&p).expect("write");
    let back: Proposal = serde_json::from_str(&text).expect("read");
    assert_eq!(back.json().expect("json").get(), text);
    assert_eq!((back.time_ms, back.term, back.wall_ms), (11, Some(4), None));
    assert_eq!(back.command.to_string(), "create Director/default/y");

    // Text this build would not write (an entry from before issue 24, with the fields in
    // another order and an unknown one) is read into the same fields and kept as it was: a
    // follower's log holds the leader's bytes.
    let legacy = r#"{"command":{"members":{"Retire":{"node_id":1}}},"later":true,"time_ms":3}"#;
    let old: Proposal = serde_json::from_str(legacy).expect("read legacy");
    assert_eq!((old.time_ms, old.term, old.wall_ms), (3, None, None));
    assert_eq!(serde_json::to_string(&old).expect("write"), legacy);

    // But a format-1 command is written again in format 2, as it always was.
    let format_1 = r#"{"time_ms":3,"command":{"RetireNode":{"node_id":1}}}"#;
    let old: Proposal = serde_json::from_str(format_1).expect("read format 1");
    assert_eq!(
        serde_json::to_string(&old).expect("write"),
        r#"{"time_ms":3,"command":{"members":{"Retire":{"node_id":1}}}}"#
    );
}

#[test]
fn reads_inside_a_larger_document_and_from_a_value() {
    let p = Proposal::new(1, Some(1), None, create("z"));
    let text = format!(
        r#"{{"index":3,"payload":{{"Normal":{}}}}}"#,
        serde_json::to_string(&p).expect("write")
    );
    let back: serde_json::Value = serde_json::from_str(&text).expect("read");
    // A `Value` keeps its keys sorted: the text kept is another spelling of the same fields.
    let from_value: Proposal =
        serde_json::from_value(back["payload"]["Normal"].clone()).expect("from a Value");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(from_value.json().expect("json").get())
            .expect("JSON"),
        serde_json::from_str::<serde_json::Value>(&fields_text(&p)).expect("JSON")
    );
    #[derive(Deserialize)]
    struct Doc {
        payload: Payload,
    }
    #[derive(Deserialize)]
    enum Payload {
        Normal(Proposal),
    }
    let Doc {
        payload: Payload::Normal(inner),
    } = serde_json::from_str(&text).expect("read nested");
    assert_eq!(inner.json().expect("json").get(), fields_text(&p));
}

#[test]
fn a_bad_field_is_refused_with_its_name() {
    let err = serde_json::from_str::<Proposal>(r#"{"time_ms":"soon","command":{}}"#)
        .expect_err("a string time");
    assert!(
        err.to_string().contains("invalid type: string \"soon\""),
        "{err}"
    );
    let err = serde_json::from_str::<Proposal>(r#"{"time_ms":1}"#).expect_err("no command");
    assert!(err.to_string().contains("missing field `command`"), "{err}");
    assert!(serde_json::from_str::<Proposal>(r#"{"time_ms":1,"#).is_err());
}
