//! TLS and mutual TLS: a cluster serving only mutual TLS elects, replicates, forwards and
//! fails over over it; plaintext, certificate-less and foreign-CA clients are refused on both
//! ports; the peer port admits member nodes' certificates only.

use std::path::Path;
use std::time::Duration;

use steward::client::Client;
use steward::proto::raft_v1::raft_peer_client::RaftPeerClient;
use steward::proto::raft_v1::ReadIndexRequest;
use steward::proto::v1::resources_client::ResourcesClient;
use steward::proto::v1::Consistency;
use steward::tls::ClientTls;
use tonic::transport::{Channel, Endpoint};

use crate::harness::{create, director, get, steward_cli, TestCluster, TLS_OUTSIDER};

/// A channel to `addr` over plaintext (no `tls`) or TLS.
fn channel(addr: &str, tls: Option<&ClientTls>) -> Channel {
    let endpoint = match tls {
        Some(tls) => Endpoint::from_shared(format!("https://{addr}"))
            .expect("endpoint")
            .tls_config(tls.config())
            .expect("tls"),
        None => Endpoint::from_shared(format!("http://{addr}")).expect("endpoint"),
    };
    endpoint
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect_lazy()
}

/// A read of Director `name` through `addr`'s client API with `tls`.
async fn read_through(
    addr: &str,
    tls: Option<&ClientTls>,
    name: &str,
) -> Result<serde_json::Value, tonic::Status> {
    get(
        &mut ResourcesClient::new(channel(addr, tls)),
        name,
        Consistency::Linearizable,
    )
    .await
}

/// A ReadIndex call on `addr`'s peer port with `tls`.
async fn peer_call(addr: &str, tls: Option<&ClientTls>) -> Result<u64, tonic::Status> {
    RaftPeerClient::new(channel(addr, tls))
        .read_index(ReadIndexRequest {})
        .await
        .map(|r| r.into_inner().read_index)
}

fn with_identity(cluster: &TestCluster, cert: &Path, key: &Path) -> ClientTls {
    let ca = &cluster.pki.as_ref().expect("tls cluster").ca;
    ClientTls::from_files(ca, Some(cert), Some(key)).expect("client tls")
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_cluster_serves_members_and_refuses_the_rest() {
    let mut cluster = TestCluster::start_tls(3).await;
    let pki = cluster.pki.clone().expect("pki");
    let followers = cluster.followers().await;
    let leader = cluster.wait_leader().await;

    // Written through a follower: forwarded to the leader over the peer port's mutual TLS.
    let mut res = cluster.res(followers[0]).await;
    create(&mut res, director("over-tls", &[]))
        .await
        .expect("create through a follower");
    // A linearizable read on the other follower takes its read index over the peer port.
    let other = cluster.client_tls("other");
    let addrs: std::collections::BTreeMap<u64, String> =
        (1..=3).map(|id| (id, cluster.client_addr(id))).collect();
    let addr = |id: u64| addrs[&id].clone();
    let read = read_through(&addr(followers[1]), other.as_ref(), "over-tls")
        .await
        .expect("read with the other client certificate");
    assert_eq!(read["metadata"]["name"], "over-tls");

    // The library client and the CLI, as users run them.
    let client = Client::connect_with(
        &[addr(followers[1])],
        Duration::from_secs(10),
        other.as_ref(),
    )
    .expect("client");
    client
        .get("Director", "default", "over-tls", Consistency::Linearizable)
        .await
        .expect("library client over TLS");
    let admin = &pki.clients[0].1;
    let (ca, cert, key) = (
        pki.ca.display().to_string(),
        admin.cert.display().to_string(),
        admin.key.display().to_string(),
    );
    let listed = steward_cli(
        &addr(leader),
        None,
        &[
            "--cacert", &ca, "--cert", &cert, "--key", &key, "get", "Director", "-o", "json",
        ],
    )
    .await;
    assert!(listed.contains("over-tls"), "{listed}");

    // Refused on the client API: plaintext, TLS without a client certificate, a certificate
    // from another CA, and a server checked against another CA.
    let foreign_dir = tempfile::tempdir().expect("tempdir");
    let foreign = steward::tls::generate(
        foreign_dir.path(),
        &[1],
        &["127.0.0.1".to_string()],
        &["admin".to_string()],
    )
    .expect("foreign pki");
    let no_cert = ClientTls::from_files(&pki.ca, None, None).expect("ca only");
    let foreign_cert = with_identity(
        &cluster,
        &foreign.clients[0].1.cert,
        &foreign.clients[0].1.key,
    );
    let foreign_ca = ClientTls::from_files(
        &foreign.ca,
        Some(&pki.clients[0].1.cert),
        Some(&pki.clients[0].1.key),
    )
    .expect("foreign ca");
    for (what, tls) in [
        ("plaintext", None),
        ("no client certificate", Some(&no_cert)),
        ("a client certificate of another CA", Some(&foreign_cert)),
        (
            "a server certificate checked against another CA",
            Some(&foreign_ca),
        ),
    ] {
        let refused = read_through(&addr(leader), tls, "over-tls").await;
        assert!(refused.is_err(), "client API accepted {what}: {refused:?}");
    }

    // The peer port: a member node's certificate is admitted; a client's certificate and a
    // node certificate of a non-member are refused with PermissionDenied, plaintext and
    // certificate-less connections at the handshake.
    let peer = cluster.nodes[&leader].config.peer_addr.clone();
    let node_cert = |id: u64| {
        let files = &pki
            .nodes
            .iter()
            .find(|(n, _)| *n == id)
            .expect("node cert")
            .1;
        ClientTls::from_files(&pki.ca, Some(&files.cert), Some(&files.key)).expect("node tls")
    };
    peer_call(&peer, Some(&node_cert(followers[0])))
        .await
        .expect("a member's certificate is admitted");
    let client_cert = cluster.client_tls("admin").expect("admin");
    let denied = peer_call(&peer, Some(&client_cert))
        .await
        .expect_err("client cert");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("not a node's"), "{denied:?}");
    let denied = peer_call(&peer, Some(&node_cert(TLS_OUTSIDER)))
        .await
        .expect_err("non-member");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert!(
        denied.message().contains("node 99 is not a member"),
        "{denied:?}"
    );
    for (what, tls) in [("plaintext", None), ("no certificate", Some(&no_cert))] {
        let refused = peer_call(&peer, tls).await;
        assert!(refused.is_err(), "peer port accepted {what}: {refused:?}");
    }

    // kill -9 the leader: the others elect over TLS, and it rejoins when restarted.
    cluster.kill(leader);
    let survivors: Vec<u64> = followers.clone();
    let new_leader = cluster.wait_leader_among(&survivors).await;
    assert_ne!(new_leader, leader);
    let mut res = cluster.res(new_leader).await;
    create(&mut res, director("after-failover", &[]))
        .await
        .expect("write after failover");
    cluster.spawn(leader);
    crate::harness::wait_for(
        "the old leader to catch up",
        Duration::from_secs(30),
        || {
            let addr = addr(leader);
            let other = other.clone();
            async move {
                read_through(&addr, other.as_ref(), "after-failover")
                    .await
                    .ok()
                    .map(|_| ())
            }
        },
    )
    .await;
}
