//! `steward certs create`: a new CA and the certificates of a cluster's nodes and clients, as
//! PEM files for the nodes' `[tls]` sections and the clients' `--cacert`, `--cert` and `--key`;
//! `steward certs sign`: more of them (a new node or client, renewals) with that CA.
//! The certificates are made by `crate::tls::issue`; this module turns the command line into a
//! `PkiPlan` (host name patterns expanded per node) and prints what was written.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use super::render::{self, OutputFormat, Table};
use super::GlobalOpts;
use crate::tls::{node_common_name, CaSource, GeneratedPki, PkiPlan};

/// Most node certificates one `certs create` makes (`--nodes`).
pub const CERTS_NODES_MAX: u64 = 100;

/// The CA's subject common name.
const CA_NAME: &str = "steward CA";

#[derive(Debug, clap::Subcommand)]
pub enum CertsCommand {
    /// Make a new CA, a certificate for each of nodes 1 to N and one per client, in a directory.
    #[command(after_help = CREATE_EXAMPLES)]
    Create(CreateArgs),
    /// Sign more certificates with the CA `certs create` made: a node being added to the
    /// cluster, a new client, or renewals of expiring ones (--force).
    #[command(after_help = SIGN_EXAMPLES)]
    Sign(SignArgs),
}

const SIGN_EXAMPLES: &str = "\
Examples:
  # Node 4, before `steward member add-learner 4 ...`:
  steward certs sign --ca-dir certs --node 4 --host 'steward{id}' --host localhost,127.0.0.1
  # A client certificate for user alice, and node 2's renewed for another year:
  steward certs sign --ca-dir certs --client alice
  steward certs sign --ca-dir certs --node 2 --host 'steward{id}' --force";

/// How long node and client certificates are valid unless `--valid-for` says otherwise.
const DEFAULT_VALID_FOR: &str = "365days";

#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The directory `certs create` wrote: its ca.pem and ca-key.pem sign, and the new files go
    /// there too.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: PathBuf,
    /// A node id to sign a certificate for (repeat the flag or separate ids with commas).
    #[arg(long = "node", value_name = "ID", value_delimiter = ',')]
    pub nodes: Vec<u64>,
    /// As for `certs create`; needed with --node.
    #[arg(long = "host", value_name = "NAME", value_delimiter = ',')]
    pub hosts: Vec<String>,
    #[command(flatten)]
    pub leaves: Leaves,
    /// Replace certificates already there (a renewal: the CA stays, so nothing else changes).
    #[arg(long)]
    pub force: bool,
}

const CREATE_EXAMPLES: &str = "\
Examples:
  # The Docker Compose cluster (cluster-configs/docker/gen-certs.sh runs this):
  steward certs create --out certs --nodes 3 --host 'steward{id}' --host localhost,127.0.0.1 --client admin
  # The Kubernetes StatefulSet steward in namespace default (pod steward-0 is node 1):
  steward certs create --out certs --nodes 3 --client admin,steward-probe \\
    --host 'steward-{ordinal}.steward,steward-{ordinal}.steward.default.svc.cluster.local' \\
    --host steward-client,steward-client.default.svc.cluster.local,localhost,127.0.0.1";

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// Directory to write into (created, readable by its owner only, if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Nodes 1 to N each get a certificate, with common name steward-node-<id> (the peer port
    /// admits no other).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=CERTS_NODES_MAX))]
    pub nodes: u64,
    /// A DNS name or IP address clients and peers dial the nodes by; `{id}` stands for the
    /// node's id and `{ordinal}` for id - 1 (a StatefulSet pod's ordinal). Repeat the flag or
    /// separate names with commas; every node's certificate gets every name.
    #[arg(
        long = "host",
        value_name = "NAME",
        required = true,
        value_delimiter = ','
    )]
    pub hosts: Vec<String>,
    #[command(flatten)]
    pub leaves: Leaves,
    /// Replace files already in DIR (a new CA: certificates signed by the old one stop being
    /// trusted by nodes that load it).
    #[arg(long)]
    pub force: bool,
}

/// What `create` and `sign` share: the client certificates, and how long certificates last.
#[derive(Debug, clap::Args)]
pub struct Leaves {
    /// A client certificate with this common name (the user name when authentication is on).
    /// Repeat the flag or separate names with commas.
    #[arg(long = "client", value_name = "NAME", value_delimiter = ',')]
    pub clients: Vec<String>,
    /// How long the node and client certificates are valid, from now (e.g. 90days, 1y); a CA
    /// `certs create` makes is valid for ten years, and `certs sign` renews the others with it.
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_VALID_FOR, value_parser = humantime::parse_duration)]
    pub valid_for: Duration,
}

/// Refuses, naming the first of `plan`'s files already in `dir`, unless `force`; `hint` says
/// what --force would do.
fn refuse_existing(plan: &PkiPlan, dir: &Path, force: bool, hint: &str) -> anyhow::Result<()> {
    if force {
        return Ok(());
    }
    match plan.files(dir)?.into_iter().find(|f| f.exists()) {
        Some(existing) => anyhow::bail!("{} already exists: {hint}", existing.display()),
        None => Ok(()),
    }
}

/// `steward certs ...`.
pub fn run(cmd: CertsCommand, global: &GlobalOpts) -> anyhow::Result<()> {
    match cmd {
        CertsCommand::Create(args) => {
            let plan = plan(&args)?;
            let hint = "pass --force to replace the whole set (a new CA), or choose another --out";
            refuse_existing(&plan, &args.out, args.force, hint)?;
            let pki = crate::tls::issue(&args.out, &plan)
                .with_context(|| format!("certs create in {}", args.out.display()))?;
            print!("{}", describe(&pki, &plan, global.output)?);
            Ok(())
        }
        CertsCommand::Sign(args) => {
            let plan = sign_plan(&args)?;
            let hint = "pass --force to renew it (the CA stays the same)";
            refuse_existing(&plan, &args.ca_dir, args.force, hint)?;
            let pki = crate::tls::issue(&args.ca_dir, &plan)
                .with_context(|| format!("certs sign in {}", args.ca_dir.display()))?;
            print!("{}", describe(&pki, &plan, global.output)?);
            Ok(())
        }
    }
}

/// The plan `certs sign` asks for: the CA in --ca-dir, the nodes and clients named.
fn sign_plan(args: &SignArgs) -> anyhow::Result<PkiPlan> {
    if args.nodes.is_empty() && args.leaves.clients.is_empty() {
        anyhow::bail!("nothing to sign: name a --node or a --client");
    }
    if !args.nodes.is_empty() && args.hosts.is_empty() {
        anyhow::bail!("--node needs --host: the names clients and peers dial the node by");
    }
    let read = |file: &str| {
        let path = args.ca_dir.join(file);
        std::fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read {} (certs sign needs the ca.pem and ca-key.pem of certs create)",
                path.display()
            )
        })
    };
    let ca = CaSource::Existing {
        cert_pem: read("ca.pem")?,
        key_pem: read("ca-key.pem")?,
    };
    Ok(PkiPlan {
        ca,
        nodes: node_hosts(args.nodes.iter().copied(), &args.hosts)?,
        clients: args.leaves.clients.clone(),
        valid_for: args.leaves.valid_for,
        overwrite: args.force,
    })
}

/// Each node with the host patterns expanded for it, without repeats.
fn node_hosts(
    ids: impl Iterator<Item = u64>,
    patterns: &[String],
) -> anyhow::Result<Vec<(u64, Vec<String>)>> {
    let mut nodes = Vec::new();
    for id in ids {
        if id == 0 {
            anyhow::bail!("--node: node ids start at 1");
        }
        let mut hosts: Vec<String> = Vec::with_capacity(patterns.len());
        for pattern in patterns {
            let host = expand_host(pattern, id)?;
            if !hosts.contains(&host) {
                hosts.push(host);
            }
        }
        nodes.push((id, hosts));
    }
    Ok(nodes)
}

/// The plan the command line asks for: a new CA whose key is kept, nodes 1 to N each with
/// the host patterns expanded for it.
fn plan(args: &CreateArgs) -> anyhow::Result<PkiPlan> {
    Ok(PkiPlan {
        ca: CaSource::New {
            name: CA_NAME.to_string(),
            keep_key: true,
        },
        nodes: node_hosts(1..=args.nodes, &args.hosts)?,
        clients: args.leaves.clients.clone(),
        valid_for: args.leaves.valid_for,
        overwrite: args.force,
    })
}

/// `pattern` for node `id`: `{id}` and `{ordinal}` (id - 1) replaced. Refuses other braces,
/// ports, and what cannot be a DNS name or an IP address.
fn expand_host(pattern: &str, id: u64) -> anyhow::Result<String> {
    let host = pattern
        .trim()
        .replace("{id}", &id.to_string())
        .replace("{ordinal}", &(id - 1).to_string());
    if host.contains(['{', '}']) {
        anyhow::bail!("--host {pattern:?}: the only placeholders are {{id}} and {{ordinal}}");
    }
    if host.parse::<std::net::IpAddr>().is_ok() {
        return Ok(host);
    }
    if host.contains(':') {
        anyhow::bail!("--host {pattern:?}: give the host name or IP address without a port");
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    // A wildcard may stand for the leftmost label only.
    let named = host.strip_prefix("*.").unwrap_or(&host);
    if host.len() > 253 || !named.split('.').all(label_ok) {
        anyhow::bail!("--host {pattern:?}: {host:?} is neither a DNS name nor an IP address");
    }
    Ok(host)
}

/// What was written: a table (or JSON/YAML) of the certificates and keys with what each is
/// for, and where the CA's key must not go.
fn describe(pki: &GeneratedPki, plan: &PkiPlan, format: OutputFormat) -> anyhow::Result<String> {
    let show = |p: &Path| p.display().to_string();
    let ca_key = pki.ca_key.as_deref().map(show).unwrap_or_default();
    let hosts = |id: u64| {
        plan.nodes
            .iter()
            .find(|(n, _)| *n == id)
            .map(|(_, h)| h.clone())
            .unwrap_or_default()
    };
    if format != OutputFormat::Table {
        let nodes: Vec<_> = pki
            .nodes
            .iter()
            .map(|(id, f)| {
                json!({"id": id, "commonName": node_common_name(*id), "cert": show(&f.cert),
                       "key": show(&f.key), "hosts": hosts(*id)})
            })
            .collect();
        let clients: Vec<_> = pki
            .clients
            .iter()
            .map(
                |(name, f)| json!({"commonName": name, "cert": show(&f.cert), "key": show(&f.key)}),
            )
            .collect();
        let value = json!({"ca": {"cert": show(&pki.ca), "key": ca_key},
                           "nodes": nodes, "clients": clients});
        return render::structured(&value, format);
    }
    let mut table = Table::new(&["FOR", "COMMON-NAME", "CERT", "KEY", "HOSTS"]);
    let ca_name = match &plan.ca {
        CaSource::New { name, .. } => name.clone(),
        CaSource::Existing { .. } => "(existing, signed with)".to_string(),
    };
    table.row(vec![
        "CA".to_string(),
        ca_name,
        show(&pki.ca),
        ca_key.clone(),
    ]);
    for (id, files) in &pki.nodes {
        table.row(vec![
            format!("node {id}"),
            node_common_name(*id),
            show(&files.cert),
            show(&files.key),
            hosts(*id).join(","),
        ]);
    }
    for (name, files) in &pki.clients {
        table.row(vec![
            "client".to_string(),
            name.clone(),
            show(&files.cert),
            show(&files.key),
        ]);
    }
    let mut out = table.render();
    let until = std::time::SystemTime::now() + plan.valid_for;
    out.push_str(&format!(
        "Node and client certificates valid until {} (--valid-for {}); renew them with \
         `steward certs sign ... --force` before then.\n",
        humantime::format_rfc3339_seconds(until),
        whole_days(plan.valid_for)
    ));
    if !ca_key.is_empty() {
        out.push_str(&format!(
            "Keep {ca_key} away from nodes and clients (none of them needs it): whoever holds it \
             can sign certificates the whole cluster trusts.\n"
        ));
    }
    Ok(out)
}

/// "365days" for a whole number of days (humantime would say "11months 30days 3h 50m 24s"),
/// else humantime's form.
fn whole_days(d: Duration) -> String {
    let secs = d.as_secs();
    if secs % 86_400 == 0 && d.subsec_nanos() == 0 {
        format!("{}days", secs / 86_400)
    } else {
        humantime::format_duration(d).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TlsConfig;
    use crate::tls::{common_name, ClientTls, NodeTls};
    use clap::Parser;

    fn parse(args: &[&str]) -> CreateArgs {
        let mut argv = vec!["steward", "certs", "create"];
        argv.extend_from_slice(args);
        match super::super::Cli::try_parse_from(argv)
            .expect("parse")
            .command
        {
            super::super::Command::Certs(CertsCommand::Create(args)) => args,
            other => panic!("parsed as {other:?}"),
        }
    }

    fn der(path: &Path) -> Vec<u8> {
        let pem = std::fs::read_to_string(path).expect("read");
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).expect("b64")
    }

    #[test]
    fn host_patterns_expand_per_node() {
        assert_eq!(expand_host("steward{id}", 2).expect("id"), "steward2");
        assert_eq!(
            expand_host("steward-{ordinal}.steward.default.svc.cluster.local", 1).expect("ord"),
            "steward-0.steward.default.svc.cluster.local"
        );
        assert_eq!(expand_host("127.0.0.1", 3).expect("ip"), "127.0.0.1");
        assert_eq!(expand_host("::1", 3).expect("ipv6"), "::1");
        assert_eq!(expand_host("*.steward", 3).expect("wildcard"), "*.steward");
        for (bad, want) in [
            ("steward{node}", "the only placeholders"),
            ("steward1:7000", "without a port"),
            ("stew ard", "neither a DNS name"),
            ("", "neither a DNS name"),
            ("a..b", "neither a DNS name"),
            ("-a", "neither a DNS name"),
            ("a.*.b", "neither a DNS name"),
        ] {
            let err = expand_host(bad, 1).expect_err(bad).to_string();
            assert!(err.contains(want), "{bad}: {err}");
        }
    }

    #[test]
    fn the_command_line_becomes_a_plan() {
        let args = parse(&[
            "--out",
            "certs",
            "--nodes",
            "2",
            "--host",
            "steward{id},localhost",
            "--host",
            "127.0.0.1",
            "--host",
            "localhost",
            "--client",
            "admin",
            "--client",
            "probe",
        ]);
        let plan = plan(&args).expect("plan");
        assert_eq!(
            plan.nodes,
            [
                (
                    1,
                    vec!["steward1".into(), "localhost".into(), "127.0.0.1".into()]
                ),
                (
                    2,
                    vec!["steward2".into(), "localhost".into(), "127.0.0.1".into()]
                ),
            ]
        );
        assert_eq!(plan.clients, ["admin", "probe"]);
        assert!(matches!(plan.ca, CaSource::New { keep_key: true, .. }) && !plan.overwrite);
        assert_eq!(plan.valid_for, Duration::from_secs(365 * 86_400));
        assert_eq!(whole_days(plan.valid_for), "365days");
        assert_eq!(whole_days(Duration::from_secs(90)), "1m 30s");
        let refused = |args: &[&str]| {
            let mut argv = vec!["steward", "certs", "create", "--out", "d"];
            argv.extend_from_slice(args);
            super::super::Cli::try_parse_from(argv).is_err()
        };
        assert!(refused(&["--nodes", "3"]), "--host is required");
        assert!(refused(&["--host", "a"]), "--nodes is required");
        assert!(refused(&["--nodes", "0", "--host", "a"]));
        assert!(refused(&["--nodes", "101", "--host", "a"]));
    }

    /// What an operator does: create a set, load it as a node and as a client would, and be
    /// refused a second run without --force.
    #[test]
    fn created_files_load_as_node_and_client_tls_and_are_not_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("certs");
        let out_arg = out.display().to_string();
        let args = parse(&[
            "--out",
            &out_arg,
            "--nodes",
            "3",
            "--host",
            "steward{id},localhost,127.0.0.1",
            "--client",
            "admin",
        ]);
        let plan = plan(&args).expect("plan");
        let pki = crate::tls::issue(&out, &plan).expect("issue");
        for (id, files) in &pki.nodes {
            let config = TlsConfig {
                ca_file: Some(pki.ca.clone()),
                cert_file: Some(files.cert.clone()),
                key_file: Some(files.key.clone()),
                client_cert_required: true,
                ..TlsConfig::default()
            };
            assert!(NodeTls::load(&config).expect("node tls").is_some());
            assert_eq!(
                common_name(&der(&files.cert)).and_then(|cn| crate::tls::node_id_of(&cn)),
                Some(*id)
            );
        }
        assert_eq!(pki.nodes[2].1.cert, out.join("steward-node-3.pem"));
        let admin = &pki.clients[0].1;
        ClientTls::from_files(&pki.ca, Some(&admin.cert), Some(&admin.key)).expect("client");
        assert_eq!(
            pki.ca_key.as_deref(),
            Some(out.join("ca-key.pem").as_path())
        );

        let text = describe(&pki, &plan, OutputFormat::Table).expect("describe");
        assert!(
            text.lines().nth(2).is_some_and(
                |l| l.starts_with("node 1") && l.ends_with("steward1,localhost,127.0.0.1")
            ),
            "{text}"
        );
        assert!(text.contains("ca-key.pem away from nodes"), "{text}");
        let json: serde_json::Value =
            serde_json::from_str(&describe(&pki, &plan, OutputFormat::Json).expect("json"))
                .expect("json");
        assert_eq!(json["nodes"][1]["commonName"], "steward-node-2");

        let global = super::super::Cli::try_parse_from(["steward", "cluster", "status"])
            .expect("parse")
            .global;
        let err = run(CertsCommand::Create(args), &global)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("ca.pem already exists: pass --force"), "{err}");
    }

    /// A node added later and a new client get certificates from the same CA, chained to it and
    /// valid for what --valid-for said; a second sign is refused without --force, and renews
    /// with it.
    #[test]
    fn sign_adds_certificates_chained_to_the_same_ca() {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("certs");
        let out_arg = out.display().to_string();
        let created = parse(&["--out", &out_arg, "--nodes", "3", "--host", "steward{id}"]);
        crate::tls::issue(&out, &plan(&created).expect("plan")).expect("create");
        let sign = |extra: &[&str]| -> anyhow::Result<GeneratedPki> {
            let mut argv = vec!["steward", "certs", "sign", "--ca-dir", &out_arg];
            argv.extend_from_slice(extra);
            let cli = super::super::Cli::try_parse_from(argv).expect("parse");
            let super::super::Command::Certs(CertsCommand::Sign(args)) = cli.command else {
                panic!("not certs sign");
            };
            let plan = sign_plan(&args)?;
            refuse_existing(&plan, &args.ca_dir, args.force, "exists")?;
            crate::tls::issue(&args.ca_dir, &plan)
        };
        let pki = sign(&[
            "--node",
            "4",
            "--host",
            "steward{id}",
            "--client",
            "alice",
            "--valid-for",
            "30days",
        ])
        .expect("sign");
        let ca_der = der(&out.join("ca.pem"));
        let (_, ca) = X509Certificate::from_der(&ca_der).expect("ca");
        for files in [&pki.nodes[0].1, &pki.clients[0].1] {
            let leaf_der = der(&files.cert);
            let (_, leaf) = X509Certificate::from_der(&leaf_der).expect("leaf");
            assert_eq!(leaf.issuer(), ca.subject());
            leaf.verify_signature(Some(ca.public_key()))
                .expect("signed by the CA");
            let days = (leaf.validity().not_after.timestamp()
                - leaf.validity().not_before.timestamp())
                / 86_400;
            assert_eq!(days, 30, "30 days, plus the clock-skew allowance");
        }
        assert_eq!(
            common_name(&der(&pki.nodes[0].1.cert)).as_deref(),
            Some("steward-node-4")
        );
        let again = sign(&["--client", "alice"]).expect_err("exists");
        assert!(
            again
                .to_string()
                .ends_with("alice.pem already exists: exists"),
            "{again}"
        );
        sign(&["--client", "alice", "--force"]).expect("renewed");
        let refused = |extra: &[&str]| sign(extra).expect_err("refused").to_string();
        assert!(refused(&[]).contains("nothing to sign"));
        assert!(refused(&["--node", "5"]).contains("--node needs --host"));
        let empty = dir.path().join("empty").display().to_string();
        let err = {
            let argv = [
                "steward", "certs", "sign", "--ca-dir", &empty, "--client", "x",
            ];
            let cli = super::super::Cli::try_parse_from(argv).expect("parse");
            let super::super::Command::Certs(CertsCommand::Sign(args)) = cli.command else {
                panic!("not certs sign");
            };
            format!("{:#}", sign_plan(&args).expect_err("no CA"))
        };
        assert!(
            err.contains("certs sign needs the ca.pem and ca-key.pem"),
            "{err}"
        );
    }
}
