//! Authentication and roles on a real cluster: turning auth on needs an admin; then every call
//! needs a bearer token or a certificate naming a user, and each role is allowed exactly what it
//! says on every node (followers included); a revoked role and a rotated token stop working on
//! every node; the last admin cannot be removed; refusals are counted in /metrics.

use std::time::Duration;

use serde_json::json;
use steward::client::{Client, Consistency, LockMode, SubmitOptions};
use tonic::Code;

use crate::harness::{steward_cli, wait_for, TestCluster};
use crate::observability::{http_get, sample};

fn director(namespace: &str, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "deployment.servicefabrik.io/v1alpha1",
        "kind": "Director",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "options": "{}" },
    })
}

/// A call's outcome: Ok, or its code.
type Outcome = Result<(), Code>;

/// The outcome of a call as Ok or its code.
fn code<T>(r: Result<T, tonic::Status>) -> Outcome {
    r.map(|_| ()).map_err(|s| s.code())
}

#[tokio::test(flavor = "multi_thread")]
async fn each_role_is_allowed_what_it_says_and_denied_the_rest_on_every_node() {
    let cluster = TestCluster::start(3).await;
    // Asked before auth is on: the harness asks without credentials.
    let leader = cluster.wait_leader().await;
    let followers = cluster.followers().await;
    let all: Vec<String> = (1..=3).map(|id| cluster.endpoint(id)).collect();
    let open = Client::connect(&all).expect("client");

    // No admin yet: authentication cannot be turned on.
    let refused = open.auth_enable(true).await.expect_err("no admin");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(refused.message().contains("admin role"), "{refused:?}");

    let add = |name: &'static str, roles: &'static [&'static str]| {
        let open = open.clone();
        async move {
            let roles: Vec<String> = roles.iter().map(|r| r.to_string()).collect();
            let reply = open.user_add(name, &roles, false).await.expect(name);
            assert!(reply.token.starts_with(&format!("{name}.")), "{reply:?}");
            reply.token
        }
    };
    let root_token = add("root", &["admin"]).await;
    let reader_token = add("reader", &["read-only"]).await;
    let alice_token = add("alice", &["read-write:team-a"]).await;
    let bosh_token = add("bosh", &["worker"]).await;
    let bad_role = open
        .user_add("x", &["superuser".to_string()], false)
        .await
        .expect_err("unknown role");
    assert_eq!(bad_role.code(), Code::InvalidArgument, "{bad_role:?}");
    assert!(
        bad_role.message().contains("roles: role \"superuser\""),
        "{bad_role:?}"
    );
    open.create(&director("team-a", "before"))
        .await
        .expect("open before auth");
    let on = open.auth_enable(true).await.expect("enable");
    assert!(on.enabled);

    // Through a follower, so every write is also forwarded.
    let via = |token: &str| {
        Client::connect(&[cluster.endpoint(followers[0])])
            .expect("client")
            .with_token(Some(token))
            .expect("token")
    };
    let (root, reader, alice, bosh) = (
        via(&root_token),
        via(&reader_token),
        via(&alice_token),
        via(&bosh_token),
    );

    // No credentials, a forged token, a malformed header: Unauthenticated.
    let anonymous = via("");
    let err = anonymous
        .get("Director", "team-a", "before", Consistency::Linearizable)
        .await
        .expect_err("anonymous");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("bearer token"), "{err:?}");
    let forged = via(&format!("root.{}", "A".repeat(43)));
    let err = forged.user_list().await.expect_err("forged");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");

    let lin = Consistency::Linearizable;
    let no_wait = None;
    let cases: Vec<(&str, Outcome, Outcome)> = vec![
        (
            "alice creates in team-a",
            code(alice.create(&director("team-a", "a1")).await),
            Ok(()),
        ),
        (
            "alice creates in team-b",
            code(alice.create(&director("team-b", "b1")).await),
            Err(Code::PermissionDenied),
        ),
        (
            "alice reads team-a",
            code(alice.get("Director", "team-a", "a1", lin).await),
            Ok(()),
        ),
        (
            "alice reads team-b",
            code(alice.get("Director", "team-b", "b1", lin).await),
            Err(Code::PermissionDenied),
        ),
        (
            "alice lists every namespace",
            code(alice.list("Director", "", "", 0, "").await),
            Err(Code::PermissionDenied),
        ),
        (
            "alice submits an operation in team-b",
            code(
                alice
                    .op_submit(
                        "Director",
                        "team-b",
                        "b1",
                        "create",
                        &SubmitOptions::default(),
                    )
                    .await,
            ),
            Err(Code::PermissionDenied),
        ),
        (
            "alice takes a lock",
            code(
                alice
                    .lock_acquire("deploy", LockMode::Write, "alice@h", None, None, no_wait)
                    .await,
            ),
            Ok(()),
        ),
        (
            "alice lists members",
            code(alice.member_list().await),
            Ok(()),
        ),
        (
            "alice adds a learner",
            code(alice.add_learner(9, "127.0.0.1:1", "127.0.0.1:2").await),
            Err(Code::PermissionDenied),
        ),
        (
            "alice takes a snapshot",
            code(alice.snapshot().await),
            Err(Code::PermissionDenied),
        ),
        (
            "alice lists users",
            code(alice.user_list().await),
            Err(Code::PermissionDenied),
        ),
        (
            "alice registers a worker",
            code(
                alice
                    .worker_register("alice", &["Director:create"], 1, Duration::from_secs(10))
                    .await,
            ),
            Err(Code::PermissionDenied),
        ),
        (
            "reader lists every namespace",
            code(reader.list("Director", "", "", 0, "").await),
            Ok(()),
        ),
        (
            "reader reads team-a",
            code(reader.get("Director", "team-a", "a1", lin).await),
            Ok(()),
        ),
        (
            "reader writes team-a",
            code(reader.create(&director("team-a", "r1")).await),
            Err(Code::PermissionDenied),
        ),
        (
            "reader takes a lock",
            code(
                reader
                    .lock_acquire("other", LockMode::Write, "reader@h", None, None, no_wait)
                    .await,
            ),
            Err(Code::PermissionDenied),
        ),
        (
            "bosh registers as bosh@h1",
            code(
                bosh.worker_register("bosh@h1", &["Director:create"], 1, Duration::from_secs(10))
                    .await,
            ),
            Ok(()),
        ),
        (
            "bosh heartbeats as bosh@h1",
            code(bosh.worker_heartbeat("bosh@h1").await),
            Ok(()),
        ),
        (
            "bosh registers as someone else",
            code(
                bosh.worker_register("other@h1", &["Director:create"], 1, Duration::from_secs(10))
                    .await,
            ),
            Err(Code::PermissionDenied),
        ),
        (
            "bosh reads an object",
            code(bosh.get("Director", "team-a", "a1", lin).await),
            Err(Code::PermissionDenied),
        ),
        (
            "bosh lists workers",
            code(bosh.worker_list(lin).await),
            Err(Code::PermissionDenied),
        ),
        ("root lists users", code(root.user_list().await), Ok(())),
        (
            "root creates in team-b",
            code(root.create(&director("team-b", "b1")).await),
            Ok(()),
        ),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter(|(_, got, want)| got != want)
        .map(|(what, got, want)| format!("{what}: got {got:?}, want {want:?}"))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");

    // A denial names the user, the method and what it needs.
    let err = alice
        .create(&director("team-b", "b2"))
        .await
        .expect_err("denied");
    assert!(
        err.message().contains("user alice")
            && err.message().contains("/steward.v1.Resources/Create")
            && err.message().contains("read-write:team-b"),
        "{err:?}"
    );
    let me = alice.auth_status().await.expect("whoami");
    assert_eq!((me.enabled, me.user.as_str()), (true, "alice"));
    assert_eq!(me.roles, vec!["read-write:team-a".to_string()]);

    // Health checks stay open for load balancers.
    let mut health = tonic_health::pb::health_client::HealthClient::new(
        tonic::transport::Endpoint::from_shared(format!(
            "http://{}",
            cluster.client_addr(followers[1])
        ))
        .expect("endpoint")
        .connect_lazy(),
    );
    health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .expect("health without a token");

    // The CLI, as an operator runs it: the token from --auth-token (or STEWARD_TOKEN).
    let listed = steward_cli(
        &cluster.endpoint(followers[1]),
        None,
        &["--auth-token", &root_token, "user", "list", "-o", "json"],
    )
    .await;
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("json");
    let names: Vec<&str> = listed["users"]
        .as_array()
        .expect("users")
        .iter()
        .filter_map(|u| u["name"].as_str())
        .collect();
    assert_eq!(names, ["alice", "bosh", "reader", "root"]);

    // Revoked through the leader: refused on every node once each has applied it.
    let root_at_leader = Client::connect(&[cluster.endpoint(leader)])
        .expect("client")
        .with_token(Some(&root_token))
        .expect("token");
    root_at_leader
        .user_roles("alice", &[], &["read-write:team-a".to_string()])
        .await
        .expect("revoke");
    let attempts = std::sync::atomic::AtomicUsize::new(0);
    for id in 1..=3 {
        let alice_here = Client::connect(&[cluster.endpoint(id)])
            .expect("client")
            .with_token(Some(&alice_token))
            .expect("token");
        wait_for(
            &format!("node {id} to refuse alice's writes"),
            Duration::from_secs(10),
            || {
                let alice_here = alice_here.clone();
                let n = attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                async move {
                    let r = alice_here
                        .create(&director("team-a", &format!("late-{n}")))
                        .await;
                    match r {
                        Err(s) if s.code() == Code::PermissionDenied => Some(()),
                        Err(s) => panic!("node {id}: {s:?}"),
                        Ok(_) => None,
                    }
                }
            },
        )
        .await;
    }

    // A rotated token: the old one stops working, the new one works.
    let new_reader = root_at_leader
        .user_token("reader", false)
        .await
        .expect("rotate")
        .token;
    assert_ne!(new_reader, reader_token);
    let old = Client::connect(&[cluster.endpoint(leader)])
        .expect("client")
        .with_token(Some(&reader_token))
        .expect("token");
    let err = old
        .get("Director", "team-a", "a1", lin)
        .await
        .expect_err("old token");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    old.with_token(Some(&new_reader))
        .expect("token")
        .get("Director", "team-a", "a1", lin)
        .await
        .expect("new token");

    // The last admin stays.
    for err in [
        root_at_leader
            .user_roles("root", &[], &["admin".to_string()])
            .await
            .expect_err("last admin"),
        root_at_leader
            .user_delete("root")
            .await
            .expect_err("last admin"),
    ] {
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        assert!(
            err.message().contains("no user with the admin role"),
            "{err:?}"
        );
    }

    // Refusals are counted where they happened.
    let (_, metrics) = http_get(&cluster.metrics_addr(followers[0]), "/metrics").await;
    let denied = sample(
        &metrics,
        "steward_auth_refusals_total{code=\"permission_denied\"}",
    )
    .expect("permission_denied series");
    assert!(denied >= 14.0, "{denied}");
    let unauthenticated = sample(
        &metrics,
        "steward_auth_refusals_total{code=\"unauthenticated\"}",
    )
    .expect("unauthenticated series");
    assert!(unauthenticated >= 2.0, "{unauthenticated}");

    // Off again: anonymous calls work.
    root_at_leader.auth_enable(false).await.expect("disable");
    wait_for("auth off on the follower", Duration::from_secs(10), || {
        let anonymous = anonymous.clone();
        async move {
            anonymous
                .get("Director", "team-a", "a1", lin)
                .await
                .ok()
                .map(|_| ())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_certificate_logs_in_as_the_user_it_names() {
    let cluster = TestCluster::start_tls(3).await;
    let leader = cluster.wait_leader().await;
    let endpoint = vec![cluster.client_addr(leader)];
    let as_cert = |name: &str| {
        Client::connect_with(
            &endpoint,
            Duration::from_secs(10),
            cluster.client_tls(name).as_ref(),
        )
        .expect("client")
    };
    let (admin, other, third) = (as_cert("admin"), as_cert("other"), as_cert("third"));
    admin
        .user_add("admin", &["admin".to_string()], true)
        .await
        .expect("admin by certificate");
    let reply = admin
        .user_add("other", &["read-only".to_string()], true)
        .await
        .expect("other");
    assert!(reply.token.is_empty(), "--no-token issues none");
    admin.auth_enable(true).await.expect("enable");

    other
        .list("Director", "", "", 0, "")
        .await
        .expect("read-only by certificate");
    let err = other
        .create(&director("default", "x"))
        .await
        .expect_err("read-only");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = third
        .list("Director", "", "", 0, "")
        .await
        .expect_err("no such user");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("common name \"third\""), "{err:?}");
    admin
        .create(&director("default", "x"))
        .await
        .expect("admin writes");

    // A follower proxies the member list to the leader on behalf of the certificate's user: the
    // leader takes the user from the follower (a member node's certificate), not from anyone.
    let follower = cluster
        .followers()
        .await
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let other_via_follower = Client::connect_with(
        &[cluster.client_addr(follower)],
        Duration::from_secs(10),
        cluster.client_tls("other").as_ref(),
    )
    .expect("client");
    let members = other_via_follower
        .member_list()
        .await
        .expect("member list through a follower");
    assert_eq!(members.members.len(), 3);
    let err = third
        .with_token(None)
        .expect("client")
        .member_list()
        .await
        .expect_err("no such user");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
}

/// The next item of a stream, within a few seconds.
async fn next_item<T, S>(stream: &mut S) -> Result<T, tonic::Status>
where
    S: futures::Stream<Item = Result<T, tonic::Status>> + Unpin,
{
    use futures::StreamExt;
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an item within 10 s")
        .expect("the stream did not end silently")
}

#[tokio::test(flavor = "multi_thread")]
async fn open_watches_end_when_their_caller_loses_the_right_to_read() {
    let cluster = TestCluster::start(3).await;
    cluster.wait_leader().await;
    let followers = cluster.followers().await;
    let all: Vec<String> = (1..=3).map(|id| cluster.endpoint(id)).collect();
    let open = Client::connect(&all).expect("client");
    let token = |name: &'static str, role: &'static str| {
        let open = open.clone();
        async move {
            let reply = open.user_add(name, &[role.to_string()], false).await;
            reply.expect(name).token
        }
    };
    let root = token("root", "admin").await;
    let viewer = token("viewer", "read-only").await;
    let leaving = token("leaving", "read-only").await;
    open.auth_enable(true).await.expect("enable");
    let admin = open.with_token(Some(&root)).expect("token");
    // Streams on a follower: the revocation reaches it through the log.
    let on_follower = |token: &str| {
        Client::connect(&[cluster.endpoint(followers[0])])
            .expect("client")
            .with_token(Some(token))
            .expect("token")
    };
    let viewer = on_follower(&viewer);
    let mut objects = viewer.watch("Director", "", "", 0).await.expect("watch");
    let mut locks = viewer.lock_watch("").await.expect("lock watch");
    let leaving = on_follower(&leaving);
    let mut leaving_objects = leaving.watch("Director", "", "", 0).await.expect("watch");

    // Served while allowed.
    admin
        .create(&director("default", "one"))
        .await
        .expect("create");
    let no_wait = None;
    admin
        .lock_acquire("l1", LockMode::Write, "root@h", None, None, no_wait)
        .await
        .expect("lock");
    for stream in [&mut objects, &mut leaving_objects] {
        let event = next_item(stream).await.expect("first event");
        assert_eq!(event.object.expect("object")["metadata"]["name"], "one");
    }
    let event = next_item(&mut locks).await.expect("first lock event");
    assert_eq!(event.name, "l1");

    // Revoked and deleted: the next thing each stream would send is refused instead.
    admin
        .user_roles("viewer", &[], &["read-only".to_string()])
        .await
        .expect("revoke");
    admin.user_delete("leaving").await.expect("delete");
    admin
        .create(&director("default", "two"))
        .await
        .expect("create");
    admin
        .lock_acquire("l2", LockMode::Write, "root@h", None, None, no_wait)
        .await
        .expect("lock");
    let ended = next_item(&mut objects).await.expect_err("revoked");
    assert_eq!(ended.code(), Code::PermissionDenied, "{ended:?}");
    assert!(ended.message().contains("user viewer"), "{ended:?}");
    let ended = next_item(&mut locks).await.expect_err("revoked");
    assert_eq!(ended.code(), Code::PermissionDenied, "{ended:?}");
    let ended = next_item(&mut leaving_objects).await.expect_err("deleted");
    assert_eq!(ended.code(), Code::Unauthenticated, "{ended:?}");
    assert!(
        ended.message().contains("user leaving was deleted"),
        "{ended:?}"
    );
}
