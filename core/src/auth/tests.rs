//! Unit tests of the auth rules: roles, the role table, enabling, user changes, worker ids.

use super::*;

fn roles(list: &[&str]) -> BTreeSet<Role> {
    list.iter().map(|r| r.parse().expect("role")).collect()
}

fn hash(c: char) -> Option<String> {
    Some(std::iter::repeat_n(c, TOKEN_SHA256_HEX_LEN).collect())
}

fn add(name: &str, r: &[&str]) -> AuthAction {
    AuthAction::AddUser {
        name: name.to_string(),
        roles: r.iter().map(|r| r.parse().expect("role")).collect(),
        token_sha256: hash('a'),
    }
}

#[test]
fn roles_round_trip_as_text_and_bad_ones_name_the_rule() {
    for text in [
        "admin",
        "read-only",
        "read-write:team-a",
        "read-write:*",
        "worker",
    ] {
        let role: Role = text.parse().expect(text);
        assert_eq!(role.to_string(), text);
    }
    let err = "reader".parse::<Role>().expect_err("unknown");
    assert!(
        err.contains("admin, read-only, read-write:NAMESPACE"),
        "{err}"
    );
    let err = "read-write:Team_A"
        .parse::<Role>()
        .expect_err("bad namespace");
    assert!(err.contains("read-write:Team_A"), "{err}");
}

#[test]
fn the_role_table_allows_exactly_what_it_says() {
    use Access::*;
    let admin = roles(&["admin"]);
    let reader = roles(&["read-only"]);
    let team_a = roles(&["read-write:team-a"]);
    let all = roles(&["read-write:*"]);
    let worker = roles(&["worker"]);
    // (roles, user, access, allowed)
    let cases: &[(&BTreeSet<Role>, &str, Access<'_>, bool)] = &[
        (&admin, "root", Admin, true),
        (&admin, "root", Write("x"), true),
        (&admin, "root", Worker("anyone@h"), true),
        (&reader, "r", Read(Some("team-a")), true),
        (&reader, "r", Read(None), true),
        (&reader, "r", ClusterRead, true),
        (&reader, "r", Write("team-a"), false),
        (&reader, "r", Coordinate, false),
        (&reader, "r", Worker("r"), false),
        (&reader, "r", Admin, false),
        (&team_a, "alice", Read(Some("team-a")), true),
        (&team_a, "alice", Write("team-a"), true),
        (&team_a, "alice", Read(Some("team-b")), false),
        (&team_a, "alice", Write("team-b"), false),
        (&team_a, "alice", Read(None), false),
        (&team_a, "alice", ClusterRead, true),
        (&team_a, "alice", Coordinate, true),
        (&team_a, "alice", Admin, false),
        (&all, "ops", Read(None), true),
        (&all, "ops", Write("anything"), true),
        (&worker, "bosh", Worker("bosh"), true),
        (&worker, "bosh", Worker("bosh@10.0.2.2"), true),
        (&worker, "bosh", Worker("boshx"), false),
        (&worker, "bosh", Worker("other@bosh"), false),
        (&worker, "bosh", Read(Some("default")), false),
        (&worker, "bosh", ClusterRead, false),
        (&worker, "bosh", Coordinate, false),
    ];
    for (roles, user, access, allowed) in cases {
        assert_eq!(
            allows(user, roles, *access),
            *allowed,
            "{user} with {roles:?} asking {access}"
        );
    }
}

#[test]
fn enabling_needs_an_admin_and_the_last_admin_cannot_go() {
    let mut t = AuthTable::default();
    let r = t.apply(&AuthAction::Enable { enabled: true }, 1);
    assert!(matches!(r, Err(Rejection::AuthState { .. })), "{r:?}");
    assert_eq!(t, AuthTable::default(), "a refusal changes nothing");
    assert!(matches!(
        t.apply(&add("root", &["admin"]), 2),
        Ok(AuthReply { revision: 1, .. })
    ));
    assert!(matches!(
        t.apply(&add("alice", &["read-write:a"]), 3),
        Ok(AuthReply { revision: 2, .. })
    ));
    assert!(matches!(
        t.apply(&AuthAction::Enable { enabled: true }, 4),
        Ok(AuthReply {
            enabled: true,
            revision: 3,
            ..
        })
    ));
    let before = t.clone();
    let delete_root = AuthAction::DeleteUser {
        name: "root".into(),
    };
    let revoke_root = AuthAction::SetRoles {
        name: "root".into(),
        grant: vec![],
        revoke: vec![Role::Admin],
    };
    for refused in [&delete_root, &revoke_root] {
        let r = t.apply(refused, 5);
        assert!(matches!(r, Err(Rejection::AuthState { .. })), "{r:?}");
        assert_eq!(t, before);
    }
    // With a second admin, the first may go.
    let promote = AuthAction::SetRoles {
        name: "alice".into(),
        grant: vec![Role::Admin],
        revoke: vec![],
    };
    assert!(matches!(t.apply(&promote, 6), Ok(AuthReply { .. })));
    assert!(matches!(
        t.apply(&delete_root, 7),
        Ok(AuthReply { revision: 5, .. })
    ));
    assert!(!t.users.contains_key("root"));
}

#[test]
fn bad_names_hashes_and_duplicates_are_refused_and_change_nothing() {
    let mut t = AuthTable::default();
    t.apply(&add("root", &["admin"]), 1).expect("added");
    let before = t.clone();
    let cases = [
        (add("root", &[]), "user root already exists"),
        (add("", &[]), "user: \"\" must be 1 to 64"),
        (add("-x", &[]), "starting with a letter or digit"),
        (add("a b", &[]), "must be ASCII letters"),
        (
            AuthAction::AddUser {
                name: "bob".into(),
                roles: vec![],
                token_sha256: Some("abc".into()),
            },
            "token_sha256: must be 64 lowercase hex",
        ),
        (
            AuthAction::SetToken {
                name: "nobody".into(),
                token_sha256: None,
            },
            "user nobody not found",
        ),
    ];
    for (action, message) in cases {
        match t.apply(&action, 2) {
            Err(r) => {
                assert!(r.to_string().contains(message), "{r} vs {message}")
            }
            other => panic!("{action}: {other:?}"),
        }
        assert_eq!(t, before, "{action}");
    }
}

#[test]
fn worker_ids_belong_to_the_user_before_the_at() {
    assert!(worker_belongs_to("bosh", "bosh"));
    assert!(worker_belongs_to("bosh@h1", "bosh"));
    assert!(!worker_belongs_to("bosh-2", "bosh"));
    assert!(!worker_belongs_to("bos", "bosh"));
}
