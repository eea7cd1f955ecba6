//! Node config files for people: every option of `Config` written out with its explanation from
//! `config::options` (the one place options are described), the tunables commented out at their
//! defaults.
//!
//! `steward dev` writes its configs with `render`, and cluster-configs/ holds the same output
//! for 3- and 5-node loopback clusters; a test keeps those files in step with this code and with
//! the defaults in src/config.rs.

use std::path::{Path, PathBuf};

use crate::config::options::{option, section_options};
use crate::config::{
    Config, Limits, LocksConfig, MemberConfig, OperationsConfig, PoolsConfig, RaftConfig,
    StatusConfig,
};

/// The base port of the loopback cluster (`steward dev --base-port`, cluster-configs/): the
/// client port of node N is `base + N` (7001, 7002, ...).
pub const DEFAULT_BASE_PORT: u16 = 7000;
/// Peer port of loopback node N is `base + PEER_PORT_OFFSET + N` (7101, 7102, ...).
pub const PEER_PORT_OFFSET: u16 = 100;
/// Metrics port of loopback node N is `base + METRICS_PORT_OFFSET + N` (7201, 7202, ...).
pub const METRICS_PORT_OFFSET: u16 = 200;
/// Loopback ports leave room for nodes 1 to 9 only (base + 1NN would collide with peer ports).
pub const LOOPBACK_NODES_MAX: u64 = 9;
/// The highest base port: node 9's metrics port, `base + 209`, must still be a port.
pub const BASE_PORT_MAX: u16 = u16::MAX - METRICS_PORT_OFFSET - 9;

/// Loopback node `id` on the default ports: client 127.0.0.1:700N, peer 127.0.0.1:710N.
pub fn loopback_member(id: u64) -> MemberConfig {
    loopback_member_at(DEFAULT_BASE_PORT, id)
}

/// Loopback node `id` with client port `base_port + id` and peer port `base_port + 100 + id`.
/// `base_port` is at most `BASE_PORT_MAX` and `id` at most `LOOPBACK_NODES_MAX` (callers check).
pub fn loopback_member_at(base_port: u16, id: u64) -> MemberConfig {
    MemberConfig {
        id,
        peer_addr: loopback_addr(base_port, PEER_PORT_OFFSET, id),
        client_addr: loopback_addr(base_port, 0, id),
    }
}

fn loopback_addr(base_port: u16, offset: u16, id: u64) -> String {
    format!(
        "127.0.0.1:{}",
        u64::from(base_port) + u64::from(offset) + id
    )
}

/// The title of the file for node `id` in cluster-configs/<nodes>-node/.
pub fn cluster_configs_title(id: u64, nodes: u64) -> String {
    format!(
        "steward node {id} of the {nodes}-node loopback cluster.\n\
         Start it from the repository root: steward serve --config cluster-configs/{nodes}-node/node{id}.toml"
    )
}

/// Node `id` of an `nodes`-node loopback cluster keeping its data in `<data_root>/node<id>`.
pub fn loopback_config(id: u64, nodes: u64, data_root: &Path) -> Config {
    loopback_config_at(DEFAULT_BASE_PORT, id, nodes, data_root)
}

/// `loopback_config` with every port moved by `base_port - DEFAULT_BASE_PORT` (`steward dev
/// --base-port`).
pub fn loopback_config_at(base_port: u16, id: u64, nodes: u64, data_root: &Path) -> Config {
    let me = loopback_member_at(base_port, id);
    Config {
        id,
        client_addr: me.client_addr,
        peer_addr: me.peer_addr,
        metrics_addr: Some(loopback_addr(base_port, METRICS_PORT_OFFSET, id)),
        data_dir: data_root.join(format!("node{id}")),
        initial_members: (1..=nodes)
            .map(|n| loopback_member_at(base_port, n))
            .collect(),
        raft: RaftConfig::default(),
        limits: Limits::default(),
        locks: LocksConfig::default(),
        operations: Default::default(),
        status: Default::default(),
        pools: Default::default(),
        tls: crate::config::TlsConfig::plaintext(),
    }
}

/// In-container ports of the Docker Compose cluster (cluster-configs/docker/): every node
/// listens on the same ports on its own address; the host publishes them where it likes.
pub const COMPOSE_CLIENT_PORT: u16 = 7000;
pub const COMPOSE_PEER_PORT: u16 = 7100;
pub const COMPOSE_METRICS_PORT: u16 = 7200;
/// Nodes of the Compose cluster.
pub const COMPOSE_NODES: u64 = 3;

/// Compose node `id`: dialled by its service name, `steward<id>`.
pub fn compose_member(id: u64) -> MemberConfig {
    MemberConfig {
        id,
        peer_addr: format!("steward{id}:{COMPOSE_PEER_PORT}"),
        client_addr: format!("steward{id}:{COMPOSE_CLIENT_PORT}"),
    }
}

/// Where the Compose services mount the CA and their node's certificate and key (from the
/// directory `steward certs create` wrote; see cluster-configs/docker/gen-certs.sh).
pub const COMPOSE_CERTS_DIR: &str = "/etc/steward/certs";

/// Node `id` of the Compose cluster: listens on every interface of its container, keeps its
/// data in the volume at /var/lib/steward, and serves mutual TLS on both ports with the files
/// mounted under `COMPOSE_CERTS_DIR` (named as `steward certs create` names them).
pub fn compose_config(id: u64) -> Config {
    let any = |port: u16| format!("0.0.0.0:{port}");
    let cert = |file: String| Some(Path::new(COMPOSE_CERTS_DIR).join(file));
    let node = crate::tls::node_common_name(id);
    Config {
        client_addr: any(COMPOSE_CLIENT_PORT),
        peer_addr: any(COMPOSE_PEER_PORT),
        metrics_addr: Some(any(COMPOSE_METRICS_PORT)),
        data_dir: PathBuf::from("/var/lib/steward"),
        initial_members: (1..=COMPOSE_NODES).map(compose_member).collect(),
        tls: crate::config::TlsConfig {
            plaintext: false,
            ca_file: cert("ca.pem".to_string()),
            cert_file: cert(format!("{node}.pem")),
            key_file: cert(format!("{node}-key.pem")),
            client_cert_required: true,
        },
        ..loopback_config(id, COMPOSE_NODES, Path::new("."))
    }
}

/// The title of cluster-configs/docker/node<id>.toml.
pub fn compose_title(id: u64) -> String {
    format!(
        "steward node {id} of the Docker Compose cluster; mounted at /etc/steward/node{id}.toml by\n\
         cluster-configs/docker/docker-compose.yml (see the README's \"Docker Compose\")."
    )
}

/// The config as a commented TOML file headed by `title` (one line per `\n`-separated line).
/// Tunables equal to their default are written commented out; others are written with their
/// default in the comment.
pub fn render(config: &Config, title: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    for line in title.lines() {
        out.push_str(&format!("# {line}\n"));
    }
    out.push_str("#\n# Every [raft], [limits], [locks], [operations], [status] and [pools] option is listed with its default; uncomment a line to change it.\n\n");
    doc_line(&mut out, "id")?;
    out.push_str(&format!("id = {}\n", config.id));
    doc_line(&mut out, "client_addr")?;
    out.push_str(&format!("client_addr = {}\n", quote(&config.client_addr)));
    doc_line(&mut out, "peer_addr")?;
    out.push_str(&format!("peer_addr = {}\n", quote(&config.peer_addr)));
    doc_line(&mut out, "metrics_addr")?;
    match &config.metrics_addr {
        Some(addr) => out.push_str(&format!("metrics_addr = {}\n", quote(addr))),
        None => out.push_str("# metrics_addr = \"127.0.0.1:7201\"\n"),
    }
    doc_line(&mut out, "data_dir")?;
    out.push_str(&format!(
        "data_dir = {}\n",
        quote(&config.data_dir.display().to_string())
    ));
    doc_line(&mut out, "initial_members")?;
    if config.initial_members.is_empty() {
        out.push_str("initial_members = []\n");
    } else {
        out.push_str("initial_members = [\n");
        for m in &config.initial_members {
            out.push_str(&format!(
                "  {{ id = {}, peer_addr = {}, client_addr = {} }},\n",
                m.id,
                quote(&m.peer_addr),
                quote(&m.client_addr)
            ));
        }
        out.push_str("]\n");
    }
    render_tls(&mut out, &config.tls)?;
    section(
        &mut out,
        "raft",
        &toml::Value::try_from(&config.raft)?,
        &toml::Value::try_from(RaftConfig::default())?,
    )?;
    section(
        &mut out,
        "limits",
        &toml::Value::try_from(&config.limits)?,
        &toml::Value::try_from(Limits::default())?,
    )?;
    section(
        &mut out,
        "locks",
        &toml::Value::try_from(&config.locks)?,
        &toml::Value::try_from(LocksConfig::default())?,
    )?;
    section(
        &mut out,
        "operations",
        &toml::Value::try_from(config.operations())?,
        &toml::Value::try_from(OperationsConfig::default())?,
    )?;
    section(
        &mut out,
        "status",
        &toml::Value::try_from(&config.status)?,
        &toml::Value::try_from(StatusConfig::default())?,
    )?;
    section(
        &mut out,
        "pools",
        &toml::Value::try_from(&config.pools)?,
        &toml::Value::try_from(PoolsConfig::default())?,
    )?;
    Ok(out)
}

/// Writes `[tls]`: the files when TLS is on, else `plaintext = true` with how to turn TLS on.
fn render_tls(out: &mut String, tls: &crate::config::TlsConfig) -> anyhow::Result<()> {
    out.push_str("\n[tls]\n");
    out.push_str(
        "# TLS on the client API and the peer port is required unless plaintext = true is set.\n",
    );
    if tls.plaintext {
        doc_line(out, "tls.plaintext")?;
        out.push_str("plaintext = true\n");
        out.push_str("# For TLS, remove plaintext and name the PEM files (steward dev --tls makes a throw-away set):\n");
        out.push_str("# ca_file = \"certs/ca.pem\"\n");
        out.push_str("# cert_file = \"certs/steward-node-1.pem\"\n");
        out.push_str("# key_file = \"certs/steward-node-1-key.pem\"\n");
    } else {
        let path = |p: &Option<PathBuf>| {
            quote(
                &p.as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            )
        };
        doc_line(out, "tls.ca_file")?;
        out.push_str(&format!("ca_file = {}\n", path(&tls.ca_file)));
        doc_line(out, "tls.cert_file")?;
        out.push_str(&format!("cert_file = {}\n", path(&tls.cert_file)));
        doc_line(out, "tls.key_file")?;
        out.push_str(&format!("key_file = {}\n", path(&tls.key_file)));
    }
    doc_line(out, "tls.client_cert_required")?;
    if tls.client_cert_required {
        out.push_str("client_cert_required = true\n");
    } else {
        out.push_str("# client_cert_required = false\n");
    }
    Ok(())
}

/// Writes the explanation of the option `key` (dotted) as a comment line.
fn doc_line(out: &mut String, key: &str) -> anyhow::Result<()> {
    let option = option(key).ok_or_else(|| anyhow::anyhow!("{key} is not in config::options"))?;
    comment(out, option.doc);
    Ok(())
}

/// Writes `text` as `# ` comment lines of at most `COMMENT_WIDTH` columns (a longer word gets
/// a line of its own).
fn comment(out: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split_whitespace() {
        if line.len() > 1 && line.len() + 1 + word.len() > COMMENT_WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

/// The widest comment line `render` writes.
const COMMENT_WIDTH: usize = 100;

/// Writes `[name]` with one explained line per option.
fn section(
    out: &mut String,
    name: &str,
    values: &toml::Value,
    defaults: &toml::Value,
) -> anyhow::Result<()> {
    out.push_str(&format!("\n[{name}]\n"));
    for (key, doc) in section_options(name) {
        let value = values
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("{name}.{key} is documented but not a field"))?;
        let default = defaults
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("{name}.{key} has no default"))?;
        comment(out, doc);
        if value == default {
            out.push_str(&format!("# {key} = {default}\n"));
        } else {
            out.push_str(&format!("{key} = {value}  # default: {default}\n"));
        }
    }
    Ok(())
}

fn quote(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::BTreeSet;

    fn keys(value: toml::Value) -> BTreeSet<String> {
        value
            .as_table()
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn rendered_configs_parse_back_and_validate() {
        for nodes in [1, 3, 5] {
            for id in 1..=nodes {
                let config = loopback_config(id, nodes, Path::new("./steward-data"));
                let text = render(&config, "test").expect("render");
                let back: Config = toml::from_str(&text).expect("parse");
                assert_eq!(back, config);
                back.validate().expect("valid");
            }
        }
    }

    #[test]
    fn tls_configs_parse_back() {
        let mut config = loopback_config(2, 3, Path::new("d"));
        config.tls = crate::config::TlsConfig {
            ca_file: Some("certs/ca.pem".into()),
            cert_file: Some("certs/steward-node-2.pem".into()),
            key_file: Some("certs/steward-node-2-key.pem".into()),
            client_cert_required: true,
            ..Default::default()
        };
        let text = render(&config, "test").expect("render");
        assert!(!text.contains("\nplaintext = true\n"), "{text}");
        let back: Config = toml::from_str(&text).expect("parse");
        assert_eq!(back, config);
        back.validate().expect("valid");
    }

    #[test]
    fn changed_tunables_are_written_uncommented() {
        let mut config = loopback_config(1, 1, Path::new("d"));
        config.raft.heartbeat_interval_ms = 50;
        config.initial_members.clear();
        let text = render(&config, "test").expect("render");
        assert!(
            text.contains("\nheartbeat_interval_ms = 50  # default: 100\n"),
            "{text}"
        );
        assert!(text.contains("\ninitial_members = []\n"), "{text}");
        let back: Config = toml::from_str(&text).expect("parse");
        assert_eq!(back, config);
    }

    #[test]
    fn loopback_ports_follow_the_node_id() {
        let m = loopback_member(3);
        assert_eq!(
            (m.client_addr.as_str(), m.peer_addr.as_str()),
            ("127.0.0.1:7003", "127.0.0.1:7103")
        );
        let c = loopback_config_at(BASE_PORT_MAX, 9, 9, Path::new("d"));
        assert_eq!(c.metrics_addr.as_deref(), Some("127.0.0.1:65535"));
        assert_eq!(c.initial_members[0].client_addr, "127.0.0.1:65327");
    }

    // ---- cluster-configs/ ----

    fn cluster_configs_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster-configs")
    }

    /// `# key = value` lines become `key = value`; explanations stay comments.
    fn uncomment(text: &str) -> String {
        let mut out = String::new();
        for line in text.lines() {
            let option = line.strip_prefix("# ").filter(|rest| {
                rest.split_once(" = ").is_some_and(|(key, _)| {
                    !key.is_empty()
                        && key
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                })
            });
            out.push_str(option.unwrap_or(line));
            out.push('\n');
        }
        out
    }

    /// Fails when a file under cluster-configs/ differs from what `render` writes today.
    /// `STEWARD_BLESS_CONFIGS=1 cargo test --lib cluster_configs` rewrites them.
    #[test]
    fn cluster_configs_are_current() {
        let bless = std::env::var_os("STEWARD_BLESS_CONFIGS").is_some();
        let loopback = [3, 5].into_iter().flat_map(|nodes| {
            (1..=nodes).map(move |id| {
                (
                    format!("{nodes}-node/node{id}.toml"),
                    loopback_config(id, nodes, Path::new("./steward-data")),
                    cluster_configs_title(id, nodes),
                )
            })
        });
        let compose = (1..=COMPOSE_NODES).map(|id| {
            (
                format!("docker/node{id}.toml"),
                compose_config(id),
                compose_title(id),
            )
        });
        {
            for (file, config, title) in loopback.chain(compose) {
                let path = cluster_configs_dir().join(file);
                let want = render(&config, &title).expect("render");
                if bless {
                    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
                    std::fs::write(&path, &want).expect("write");
                }
                let got = std::fs::read_to_string(&path).unwrap_or_default();
                assert!(
                    got == want,
                    "{} is stale; rewrite with STEWARD_BLESS_CONFIGS=1 cargo test --lib cluster_configs",
                    path.display()
                );
            }
        }
    }

    /// cluster-configs/docker/docker-compose.yml runs one service per Compose config, named as
    /// the members dial it, with that config mounted and the client and metrics ports published.
    #[test]
    fn compose_file_agrees_with_the_node_configs() {
        let path = cluster_configs_dir().join("docker/docker-compose.yml");
        let text = std::fs::read_to_string(&path).expect("docker-compose.yml");
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("yaml");
        for id in 1..=COMPOSE_NODES {
            let member = compose_member(id);
            let host = member.peer_addr.split(':').next().expect("host");
            let service = &doc["services"][host];
            assert_eq!(service["hostname"], host, "service {host}");
            let file = format!("/etc/steward/node{id}.toml");
            assert_eq!(service["command"][2], file.as_str(), "service {host}");
            let volumes = format!("{:?}", service["volumes"]);
            assert!(
                volumes.contains(&format!("./node{id}.toml:{file}:ro")),
                "{host}: {volumes}"
            );
            let ports = format!("{:?}", service["ports"]);
            for port in [COMPOSE_CLIENT_PORT, COMPOSE_METRICS_PORT] {
                assert!(ports.contains(&format!("}}:{port}")), "{host}: {ports}");
            }
            // The node's TLS files, and only those, are bind-mounted read-only from the
            // certificates dir, named as `steward certs create` names them.
            let tls = compose_config(id).tls;
            let files = [&tls.ca_file, &tls.cert_file, &tls.key_file]
                .map(|f| f.as_ref().expect("TLS file").display().to_string());
            let binds: Vec<(String, String)> = service["volumes"]
                .as_sequence()
                .expect("volumes")
                .iter()
                .filter(|v| v["type"] == "bind")
                .map(|v| {
                    assert_eq!(v["read_only"], true, "{host}: {v:?}");
                    let text = |key: &str| v[key].as_str().expect(key).to_string();
                    (text("target"), text("source"))
                })
                .collect();
            let want: Vec<(String, String)> = files
                .iter()
                .map(|f| {
                    let name = f.rsplit('/').next().expect("file name");
                    (f.clone(), format!("${{STEWARD_CERTS:-./certs}}/{name}"))
                })
                .collect();
            assert_eq!(binds, want, "{host}: certificate mounts");
            assert!(
                files[1].ends_with(&format!("/{}.pem", crate::tls::node_common_name(id))),
                "{host}: {}",
                files[1]
            );
            // Its healthcheck asks the node itself over mutual TLS with the mounted files.
            let test: Vec<String> = service["healthcheck"]["test"]
                .as_sequence()
                .expect("healthcheck test")
                .iter()
                .map(|a| a.as_str().expect("string").to_string())
                .collect();
            assert_eq!(test[0], "CMD", "{host}");
            let probe = health_probe(&test[1..], host);
            assert_eq!(
                probe.endpoints,
                format!("127.0.0.1:{COMPOSE_CLIENT_PORT}"),
                "{host}"
            );
            let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
            assert_eq!(
                [path(&probe.cacert), path(&probe.cert), path(&probe.key)],
                files.map(Some),
                "{host}: healthcheck TLS files"
            );
        }
    }

    /// A `steward ... cluster health` probe command (program first), parsed by the real command
    /// line: its global options.
    fn health_probe(command: &[String], what: &str) -> crate::cli::GlobalOpts {
        use clap::Parser;
        assert_eq!(
            command.first().map(String::as_str),
            Some("/usr/local/bin/steward"),
            "{what}: {command:?}"
        );
        let cli = crate::cli::Cli::try_parse_from(command)
            .unwrap_or_else(|e| panic!("{what}: {command:?}: {e}"));
        assert!(
            matches!(
                cli.command,
                crate::cli::Command::Cluster(super::super::member::ClusterCommand::Health)
            ),
            "{what}: {command:?} is not `cluster health`"
        );
        cli.global
    }

    /// The files a `kubectl create secret generic steward-tls --from-file=...` command in `text`
    /// (continued over lines ending in `\`) puts in the Secret, by key.
    fn secret_files(text: &str, what: &str) -> BTreeSet<String> {
        let start = text
            .find("kubectl create secret generic steward-tls")
            .unwrap_or_else(|| panic!("{what}: no `kubectl create secret generic steward-tls`"));
        let mut files = BTreeSet::new();
        for line in text[start..].lines() {
            for arg in line.split_whitespace() {
                if let Some(from) = arg.strip_prefix("--from-file=") {
                    let key = match from.split_once('=') {
                        Some((key, _)) => key,
                        None => from.rsplit('/').next().unwrap_or(from),
                    };
                    files.insert(key.to_string());
                }
            }
            if !line.trim_end().ends_with('\\') {
                break;
            }
        }
        files
    }

    /// cluster-configs/kubernetes/steward.yaml holds together: each pod's config (a ConfigMap key
    /// named after the pod) parses, validates and has the pod's node id; the members are the
    /// pods' stable names under the headless Service; the StatefulSet runs as many pods as there
    /// are configs, mounts the data dir the configs name, probes gRPC health on the client
    /// port; a PodDisruptionBudget allows one pod down. TLS: each config serves its node's
    /// certificate from the Secret steward-tls, mounted where the configs look; the readiness
    /// probe runs `steward cluster health` on the client port over mutual TLS with files of that
    /// Secret; and the `kubectl create secret` commands of the manifest's header and of the
    /// README put exactly the files the pods read into it (not the CA's key).
    #[test]
    fn kubernetes_manifests_agree_with_the_node_configs() {
        let path = cluster_configs_dir().join("kubernetes/steward.yaml");
        let text = std::fs::read_to_string(&path).expect("steward.yaml");
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde_yaml::Value::deserialize(d).expect("yaml document"))
            .collect();
        let find = |kind: &str, name: &str| {
            docs.iter()
                .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("no {kind} {name}"))
                .clone()
        };
        let headless = find("Service", "steward");
        assert_eq!(headless["spec"]["clusterIP"], "None");
        assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
        let sts = find("StatefulSet", "steward");
        assert_eq!(sts["spec"]["serviceName"], "steward");
        let replicas = sts["spec"]["replicas"].as_u64().expect("replicas");
        let data = find("ConfigMap", "steward-config")["data"].clone();
        let data = data.as_mapping().expect("configmap data");
        assert_eq!(data.len() as u64, replicas, "one config per pod");
        let pod = &sts["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_sequence()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        assert_eq!(args, ["serve", "--config", "/etc/steward/$(POD_NAME).toml"]);
        assert_eq!(
            container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.name"
        );
        let mount = |name: &str| {
            container["volumeMounts"]
                .as_sequence()
                .expect("mounts")
                .iter()
                .find(|m| m["name"] == name)
                .and_then(|m| m["mountPath"].as_str())
                .map(str::to_string)
                .unwrap_or_else(|| panic!("no mount {name}"))
        };
        assert_eq!(mount("config"), "/etc/steward");
        let tls_volume = pod["volumes"]
            .as_sequence()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == "tls")
            .expect("volume tls");
        assert_eq!(tls_volume["secret"]["secretName"], "steward-tls");
        let tls_dir = PathBuf::from(mount("tls"));
        let probe_command: Vec<String> = container["readinessProbe"]["exec"]["command"]
            .as_sequence()
            .expect("readiness probe exec command")
            .iter()
            .map(|a| a.as_str().expect("string").to_string())
            .collect();
        let probe = health_probe(&probe_command, "readinessProbe");
        // Every file the pods read from the Secret, by key.
        let mut secret_keys = BTreeSet::new();
        for file in [&probe.cacert, &probe.cert, &probe.key] {
            let file = file.as_ref().expect("probe TLS file");
            assert_eq!(file.parent(), Some(tls_dir.as_path()), "probe: {file:?}");
            secret_keys.insert(
                file.file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        for ordinal in 0..replicas {
            let key = format!("steward-{ordinal}.toml");
            let toml_text = data
                .get(serde_yaml::Value::from(key.as_str()))
                .and_then(|v| v.as_str())
                .unwrap_or_else(|| panic!("no {key}"));
            let config: Config = toml::from_str(toml_text).unwrap_or_else(|e| panic!("{key}: {e}"));
            config.validate().unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(config.id, ordinal + 1, "{key}");
            assert_eq!(
                config.data_dir.display().to_string(),
                mount("data"),
                "{key}"
            );
            let members: Vec<(u64, String, String)> = config
                .initial_members
                .iter()
                .map(|m| (m.id, m.peer_addr.clone(), m.client_addr.clone()))
                .collect();
            let want: Vec<(u64, String, String)> = (0..replicas)
                .map(|o| {
                    (
                        o + 1,
                        format!("steward-{o}.steward:{COMPOSE_PEER_PORT}"),
                        format!("steward-{o}.steward:{COMPOSE_CLIENT_PORT}"),
                    )
                })
                .collect();
            assert_eq!(members, want, "{key}");
            let port = |addr: &str| addr.rsplit(':').next().and_then(|p| p.parse::<u64>().ok());
            assert_eq!(
                port(&probe.endpoints),
                port(&config.client_addr),
                "{key}: readiness probes the client port"
            );
            let tls = &config.tls;
            assert!(
                !tls.plaintext && tls.client_cert_required,
                "{key}: mutual TLS"
            );
            assert_eq!(
                tls.ca_file, probe.cacert,
                "{key}: the probe trusts the nodes' CA"
            );
            let node = crate::tls::node_common_name(config.id);
            for (file, name) in [
                (&tls.cert_file, format!("{node}.pem")),
                (&tls.key_file, format!("{node}-key.pem")),
            ] {
                assert_eq!(file.as_ref(), Some(&tls_dir.join(&name)), "{key}");
                secret_keys.insert(name);
            }
        }
        assert!(!secret_keys.contains("ca-key.pem"));
        assert_eq!(
            secret_files(&text, "steward.yaml"),
            secret_keys,
            "steward.yaml's header: kubectl create secret"
        );
        let readme =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
                .expect("README.md");
        assert_eq!(
            secret_files(&readme, "README.md"),
            secret_keys,
            "README.md: kubectl create secret"
        );
        let pdb = find("PodDisruptionBudget", "steward");
        assert_eq!(pdb["spec"]["maxUnavailable"], 1);
        assert_eq!(
            sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"],
            "data"
        );
    }

    /// Every file loads and validates, and its commented-out options are exactly the defaults of
    /// src/config.rs, with none missing.
    #[test]
    fn cluster_configs_load_with_documented_defaults() {
        let mut files = Vec::new();
        for dir in std::fs::read_dir(cluster_configs_dir()).expect("cluster-configs/") {
            let dir = dir.expect("entry").path();
            for file in std::fs::read_dir(&dir).into_iter().flatten() {
                let file = file.expect("entry").path();
                if file.extension().is_some_and(|e| e == "toml") {
                    files.push(file);
                }
            }
        }
        assert!(
            files.len() >= 11,
            "expected the 3-node, 5-node and Compose configs, found {files:?}"
        );
        let full_raft = keys(toml::Value::try_from(RaftConfig::default()).expect("raft"));
        let full_limits = keys(toml::Value::try_from(Limits::default()).expect("limits"));
        let full_locks = keys(toml::Value::try_from(LocksConfig::default()).expect("locks"));
        let full_ops = keys(toml::Value::try_from(OperationsConfig::default()).expect("ops"));
        for file in files {
            let name = file.display().to_string();
            let config = Config::load(&file).unwrap_or_else(|e| panic!("{e}"));
            config.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            let stem = file
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            assert_eq!(
                stem,
                format!("node{}", config.id),
                "{name}: file name and id differ"
            );
            let text = uncomment(&std::fs::read_to_string(&file).expect("read"));
            let table: toml::Value =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{name} uncommented: {e}"));
            assert_eq!(
                keys(table["raft"].clone()),
                full_raft,
                "{name}: [raft] options missing or unknown"
            );
            assert_eq!(
                keys(table["limits"].clone()),
                full_limits,
                "{name}: [limits] options missing or unknown"
            );
            assert_eq!(
                keys(table["locks"].clone()),
                full_locks,
                "{name}: [locks] options missing or unknown"
            );
            assert_eq!(
                keys(table["operations"].clone()),
                full_ops,
                "{name}: [operations] options missing or unknown"
            );
            let defaults: Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                *defaults.operations(),
                OperationsConfig::default(),
                "{name}: commented [operations] defaults differ"
            );
            assert_eq!(
                defaults.locks,
                LocksConfig::default(),
                "{name}: commented [locks] defaults differ"
            );
            assert_eq!(
                defaults.raft,
                RaftConfig::default(),
                "{name}: commented [raft] defaults differ"
            );
            assert_eq!(
                defaults.limits,
                Limits::default(),
                "{name}: commented [limits] defaults differ"
            );
        }
    }
}
