use super::*;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::source_code_info::Location;
use prost_types::{
    EnumOptions, EnumValueDescriptorProto, FieldDescriptorProto, FileOptions,
    MethodDescriptorProto, OneofDescriptorProto, SourceCodeInfo,
};

/// The gate: the client API as built has no violation at all.
#[test]
fn the_client_api_breaks_no_rule() {
    let set = client_api().expect("decode the client API descriptor set");
    let n = counts(&set);
    assert!(n.get("files") >= Some(&1), "no steward file checked: {n:?}");
    assert!(n.get("rpcs") > Some(&50), "too few RPCs seen: {n:?}");
    assert!(n.get("fields") > Some(&300), "too few fields seen: {n:?}");
    let found = lint(&set);
    let text: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(
        found.is_empty(),
        "{} proto lint violations (see src/proto_lint.rs for the rules):\n{}",
        found.len(),
        text.join("\n")
    );
}

fn located(path: &[i32], comment: &str) -> Location {
    Location {
        path: path.to_vec(),
        leading_comments: Some(comment.to_string()),
        ..Default::default()
    }
}

fn field(name: &str, number: i32) -> FieldDescriptorProto {
    FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional as i32),
        r#type: Some(Type::String as i32),
        ..Default::default()
    }
}

fn value(name: &str, number: i32) -> EnumValueDescriptorProto {
    EnumValueDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        ..Default::default()
    }
}

/// A file that breaks most rules; a few elements are documented (one only by a blank
/// comment, which does not count).
fn bad_file() -> FileDescriptorProto {
    let good_enum = EnumDescriptorProto {
        name: Some("Color".into()),
        value: vec![value("COLOR_UNSPECIFIED", 0), value("COLOR_RED", 1)],
        ..Default::default()
    };
    let bad_enum = EnumDescriptorProto {
        name: Some("lock_mode".into()),
        value: vec![value("READ", 1), value("LOCK_MODE_write", 0)],
        options: Some(EnumOptions {
            allow_alias: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let message = DescriptorProto {
        name: Some("bad_message".into()),
        field: vec![field("Descriptor", 1), field("fine_name", 2)],
        oneof_decl: vec![OneofDescriptorProto {
            name: Some("Choice".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let service = ServiceDescriptorProto {
        name: Some("locks_svc".into()),
        method: vec![
            MethodDescriptorProto {
                name: Some("acquire".into()),
                ..Default::default()
            },
            MethodDescriptorProto {
                name: Some("Release".into()),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    FileDescriptorProto {
        name: Some("dir/Bad-File.proto".into()),
        package: Some("steward.things".into()),
        syntax: Some("proto2".into()),
        public_dependency: vec![0],
        message_type: vec![message],
        enum_type: vec![good_enum, bad_enum],
        service: vec![service],
        options: Some(FileOptions {
            go_package: Some("example.com/steward".into()),
            ..Default::default()
        }),
        source_code_info: Some(SourceCodeInfo {
            location: vec![
                located(&[FILE_MESSAGE_TYPE, 0], "A message.\n"),
                located(&[FILE_MESSAGE_TYPE, 0, MESSAGE_FIELD, 1], "A field.\n"),
                located(&[FILE_ENUM_TYPE, 0], "Colors.\n"),
                located(&[FILE_ENUM_TYPE, 0, ENUM_VALUE, 0], "Not set.\n"),
                located(&[FILE_ENUM_TYPE, 0, ENUM_VALUE, 1], "Red.\n"),
                located(&[FILE_SERVICE, 0], "   \n"),
                located(&[FILE_SERVICE, 0, SERVICE_METHOD, 1], "Releases.\n"),
            ],
        }),
        ..Default::default()
    }
}

/// A second, clean file in another package, and an import outside `steward` that is not
/// checked at all.
fn other_files() -> Vec<FileDescriptorProto> {
    let clean = FileDescriptorProto {
        name: Some("other.proto".into()),
        package: Some("steward.v1".into()),
        syntax: Some("proto3".into()),
        ..Default::default()
    };
    let foreign = FileDescriptorProto {
        name: Some("google/Weird.proto".into()),
        package: Some("google.rpc".into()),
        message_type: vec![DescriptorProto {
            name: Some("not_checked".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    vec![clean, foreign]
}

#[test]
fn every_violation_of_a_bad_file_is_found_at_once() {
    let mut file = vec![bad_file()];
    file.extend(other_files());
    let found: Vec<String> = lint(&FileDescriptorSet { file })
        .iter()
        .map(ToString::to_string)
        .collect();
    let want = [
        "COMMENT_ENUM steward.things.lock_mode",
        "COMMENT_ENUM_VALUE steward.things.lock_mode.LOCK_MODE_write",
        "COMMENT_ENUM_VALUE steward.things.lock_mode.READ",
        "COMMENT_FIELD steward.things.bad_message.Descriptor",
        "COMMENT_ONEOF steward.things.bad_message.Choice",
        "COMMENT_RPC steward.things.locks_svc.acquire",
        "COMMENT_SERVICE steward.things.locks_svc",
        "ENUM_FIRST_VALUE_ZERO steward.things.lock_mode",
        "ENUM_NO_ALLOW_ALIAS steward.things.lock_mode",
        "ENUM_PASCAL_CASE steward.things.lock_mode",
        "ENUM_VALUE_PREFIX steward.things.lock_mode.READ",
        "ENUM_VALUE_UPPER_SNAKE_CASE steward.things.lock_mode.LOCK_MODE_write",
        "ENUM_ZERO_VALUE_SUFFIX steward.things.lock_mode.LOCK_MODE_write",
        "FIELD_LOWER_SNAKE_CASE steward.things.bad_message.Descriptor",
        "FIELD_NO_DESCRIPTOR steward.things.bad_message.Descriptor",
        "FILE_LOWER_SNAKE_CASE dir/Bad-File.proto",
        "IMPORT_NO_PUBLIC dir/Bad-File.proto",
        "MESSAGE_PASCAL_CASE steward.things.bad_message",
        "ONEOF_LOWER_SNAKE_CASE steward.things.bad_message.Choice",
        "PACKAGE_SAME_GO_PACKAGE dir/Bad-File.proto",
        "PACKAGE_SAME_GO_PACKAGE other.proto",
        "PACKAGE_SAME_PACKAGE dir/Bad-File.proto",
        "PACKAGE_SAME_PACKAGE other.proto",
        "PACKAGE_VERSION_SUFFIX steward.things",
        "RPC_PASCAL_CASE steward.things.locks_svc.acquire",
        "SERVICE_PASCAL_CASE steward.things.locks_svc",
        "SYNTAX_SPECIFIED dir/Bad-File.proto",
    ];
    assert_eq!(found, want, "got:\n{}", found.join("\n"));
}

#[test]
fn a_file_without_a_package_is_reported() {
    let file = FileDescriptorProto {
        name: Some("loose.proto".into()),
        syntax: Some("proto3".into()),
        ..Default::default()
    };
    // Not a `steward` package, so not checked: the lint looks only at steward's files.
    assert!(lint(&FileDescriptorSet {
        file: vec![file.clone()]
    })
    .is_empty());
    let mut out = Vec::new();
    FileLint::new(&file, &mut out).run();
    let rules: Vec<&str> = out.iter().map(|v| v.rule).collect();
    assert_eq!(rules, ["PACKAGE_DEFINED"]);
}

#[test]
fn names_are_classified_like_buf() {
    for ok in ["v1", "v2", "v1beta1", "v1alpha", "v12test"] {
        assert!(is_version(ok), "{ok}");
    }
    for bad in ["", "v", "v0", "v01", "1", "version1", "v1gamma", "v1beta1x"] {
        assert!(!is_version(bad), "{bad}");
    }
    assert_eq!(upper_snake("LockEventType"), "LOCK_EVENT_TYPE");
    assert_eq!(upper_snake("Consistency"), "CONSISTENCY");
    assert_eq!(upper_snake("HTTPRoute"), "HTTP_ROUTE");
    assert_eq!(upper_snake("Sha256Sum"), "SHA256_SUM");
    assert!(is_lower_snake_case("sha256"));
    assert!(is_lower_snake_case("a_b2_c"));
    for bad in ["A", "a__b", "a_", "_a", "aB", "1a", ""] {
        assert!(!is_lower_snake_case(bad), "{bad}");
    }
    assert!(is_upper_snake_case("LOCK_MODE_READ"));
    assert!(!is_upper_snake_case("LOCK_MODE_read"));
    assert!(is_pascal_case("LockMode2"));
    for bad in ["lockMode", "Lock_Mode", ""] {
        assert!(!is_pascal_case(bad), "{bad}");
    }
}
