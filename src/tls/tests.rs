//! Unit tests of TLS: generated files load, node ids from names, issuing PKI sets, bad files.

use super::*;

#[test]
fn generated_files_load_as_node_and_client_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = generate(
        dir.path(),
        &[1, 2],
        &["localhost".to_string(), "127.0.0.1".to_string()],
        &["admin".to_string()],
    )
    .expect("generate");
    assert_eq!(pki.nodes.len(), 2);
    assert_eq!(pki.nodes[1].1.cert, dir.path().join("steward-node-2.pem"));
    let config = TlsConfig {
        ca_file: Some(pki.ca.clone()),
        cert_file: Some(pki.nodes[0].1.cert.clone()),
        key_file: Some(pki.nodes[0].1.key.clone()),
        ..TlsConfig::default()
    };
    assert!(NodeTls::load(&config).expect("load").is_some());
    let admin = &pki.clients[0].1;
    ClientTls::from_files(&pki.ca, Some(&admin.cert), Some(&admin.key)).expect("client");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&admin.key)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn node_ids_come_from_common_names() {
    assert_eq!(node_id_of(&node_common_name(7)), Some(7));
    for cn in [
        "steward-node-0",
        "steward-node-",
        "steward-node-x",
        "admin",
        "node-1",
    ] {
        assert_eq!(node_id_of(cn), None, "{cn}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pki =
        generate(dir.path(), &[3], &["localhost".into()], &["ci-bot".into()]).expect("generate");
    let der = |path: &Path| {
        let pem = std::fs::read_to_string(path).expect("read");
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).expect("b64")
    };
    assert_eq!(
        common_name(&der(&pki.nodes[0].1.cert)).as_deref(),
        Some("steward-node-3")
    );
    assert_eq!(
        common_name(&der(&pki.clients[0].1.cert)).as_deref(),
        Some("ci-bot")
    );
    assert_eq!(common_name(b"junk"), None);
}

/// The subject alternative names of the certificate in PEM file `path`, as text.
fn sans_of(path: &Path) -> Vec<String> {
    let pem = std::fs::read_to_string(path).expect("read");
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).expect("b64");
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("x509");
    let san = cert
        .subject_alternative_name()
        .expect("extension")
        .map(|ext| ext.value.general_names.clone())
        .unwrap_or_default();
    san.iter()
        .map(|name| match name {
            x509_parser::extensions::GeneralName::DNSName(dns) => dns.to_string(),
            x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).expect("v4")).to_string(),
                _ => format!("{ip:?}"),
            },
            other => format!("{other:?}"),
        })
        .collect()
}

fn plan(nodes: &[(u64, &[&str])], clients: &[&str]) -> PkiPlan {
    PkiPlan {
        ca: CaSource::New {
            name: "test CA".to_string(),
            keep_key: true,
        },
        nodes: nodes
            .iter()
            .map(|(id, hosts)| (*id, hosts.iter().map(|h| h.to_string()).collect()))
            .collect(),
        clients: clients.iter().map(|c| c.to_string()).collect(),
        valid_for: std::time::Duration::from_secs(86_400),
        overwrite: false,
    }
}

#[test]
fn issued_sets_keep_the_ca_key_and_name_each_node_with_its_own_hosts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("certs");
    let plan = plan(
        &[
            (1, &["steward-0.steward", "127.0.0.1"]),
            (2, &["steward-1.steward"]),
        ],
        &["admin"],
    );
    let pki = issue(&out, &plan).expect("issue");
    let ca_key = pki.ca_key.clone().expect("kept");
    assert!(std::fs::read_to_string(&ca_key)
        .expect("ca key")
        .contains("PRIVATE KEY"));
    assert_eq!(
        sans_of(&pki.nodes[0].1.cert),
        ["steward-0.steward", "127.0.0.1"]
    );
    assert_eq!(sans_of(&pki.nodes[1].1.cert), ["steward-1.steward"]);
    let mut written: Vec<PathBuf> = std::fs::read_dir(&out)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    written.sort();
    let mut want = plan.files(&out).expect("files");
    want.sort();
    assert_eq!(written, want);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&out), 0o700);
        assert_eq!(mode(&ca_key), 0o600);
        assert_eq!(mode(&pki.nodes[1].1.key), 0o600);
    }
}

#[test]
fn issue_refuses_to_overwrite_unless_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut plan = plan(&[(1, &["localhost"])], &["admin"]);
    let first = issue(dir.path(), &plan).expect("issue");
    let before = std::fs::read(&first.ca).expect("ca");
    let err = issue(dir.path(), &plan).expect_err("refused").to_string();
    assert!(
        err.contains("ca.pem already exists; not overwriting it"),
        "{err}"
    );
    assert_eq!(std::fs::read(&first.ca).expect("ca"), before, "left alone");
    // A loose mode on a key already there does not survive an overwrite.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let key = &first.clients[0].1.key;
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        plan.overwrite = true;
        issue(dir.path(), &plan).expect("overwrite");
        let mode = std::fs::metadata(key).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_ne!(std::fs::read(&first.ca).expect("ca"), before, "a new CA");
    }
}

#[test]
fn plans_that_would_confuse_the_peer_port_or_the_files_are_refused() {
    let dir = Path::new("certs");
    for (plan, want) in [
        (
            plan(&[(1, &["a"])], &["steward-node-2"]),
            "is node 2's common name",
        ),
        (
            plan(&[(1, &["a"])], &["admin", "admin"]),
            "two certificates",
        ),
        (plan(&[(1, &["a"])], &["ca"]), "two certificates"),
        (plan(&[(1, &["a"])], &["../admin"]), "use letters, digits"),
        (plan(&[(1, &["a"])], &[""]), "use letters, digits"),
        (plan(&[(1, &[])], &[]), "names no host"),
        (plan(&[(0, &["a"])], &[]), "node ids start at 1"),
        (
            plan(&[(1, &["a"]), (1, &["b"])], &[]),
            "node 1 is given twice",
        ),
    ] {
        let err = plan.files(dir).expect_err(want).to_string();
        assert!(err.contains(want), "{err} (want {want})");
    }
    let mut no_key = plan(&[(1, &["a"])], &["admin"]);
    no_key.ca = CaSource::New {
        name: "test CA".to_string(),
        keep_key: false,
    };
    assert_eq!(no_key.files(dir).expect("files").len(), 5);
}

#[test]
fn unreadable_or_non_pem_files_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").expect("write");
    let err = ClientTls::from_files(&junk, None, None)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("--cacert") && err.contains("no PEM block"),
        "{err}"
    );
    let missing = dir.path().join("missing.pem");
    let config = TlsConfig {
        ca_file: Some(missing.clone()),
        cert_file: Some(missing.clone()),
        key_file: Some(missing),
        ..TlsConfig::default()
    };
    let err = NodeTls::load(&config).err().expect("refused").to_string();
    assert!(err.contains("tls.ca_file: cannot read"), "{err}");
    let err = ClientTls::from_files(&junk, Some(&junk), None)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("--cert needs --key"), "{err}");
}
