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
    StatusConfig, TimeConfig,
};

/// The base port of the loopback cluster (`steward dev --base-port`, cluster-configs/): the
/// client port of node N is `base + N` (7001, 7002, ...).
pub const DEFAULT_BASE_PORT: u16 = 7000;
/// Peer port of loopback node N is `base + PEER_PORT_OFFSET + N` (7101, 7102, ...).
pub const PEER_PORT_OFFSET: u16 = 100;
/// Metrics port of loopback node N is `base + METRICS_PORT_OFFSET + N` (7201, 7202, ...).
pub const METRICS_PORT_OFFSET: u16 = 200;
/// Web console port of loopback node N is `base + CONSOLE_PORT_OFFSET + N` (7301, 7302, ...).
pub const CONSOLE_PORT_OFFSET: u16 = 300;
/// Loopback ports leave room for nodes 1 to 9 only (base + 1NN would collide with peer ports).
pub const LOOPBACK_NODES_MAX: u64 = 9;
/// The highest base port: node 9's console port, `base + 309`, must still be a port.
pub const BASE_PORT_MAX: u16 = u16::MAX - CONSOLE_PORT_OFFSET - 9;

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
        console: crate::config::ConsoleConfig {
            addr: Some(loopback_addr(base_port, CONSOLE_PORT_OFFSET, id)),
            ..Default::default()
        },
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
        time: TimeConfig::default(),
        etcd: Default::default(),
        tls: crate::config::TlsConfig::plaintext(),
    }
}

/// In-container ports of the Docker Compose cluster (cluster-configs/docker/): every node
/// listens on the same ports on its own address; the host publishes them where it likes.
pub const COMPOSE_CLIENT_PORT: u16 = 7000;
pub const COMPOSE_PEER_PORT: u16 = 7100;
pub const COMPOSE_METRICS_PORT: u16 = 7200;
pub const COMPOSE_CONSOLE_PORT: u16 = 7300;
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
        console: crate::config::ConsoleConfig {
            addr: Some(any(COMPOSE_CONSOLE_PORT)),
            ..Default::default()
        },
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
    section(
        &mut out,
        "time",
        &toml::Value::try_from(&config.time)?,
        &toml::Value::try_from(TimeConfig::default())?,
    )?;
    section(
        &mut out,
        "etcd",
        &toml::Value::try_from(&config.etcd)?,
        &toml::Value::try_from(crate::config::EtcdConfig::default())?,
    )?;
    render_console(&mut out, &config.console)?;
    Ok(out)
}

/// Writes `[console]`: its address (commented out when there is no console), then its tunables
/// as `section` writes them.
fn render_console(out: &mut String, console: &crate::config::ConsoleConfig) -> anyhow::Result<()> {
    let addr = |out: &mut String, key: &str| {
        if key != "addr" {
            return false;
        }
        match &console.addr {
            Some(addr) => out.push_str(&format!("addr = {}\n", quote(addr))),
            None => out.push_str("# addr = \"127.0.0.1:7301\"\n"),
        }
        true
    };
    section_with(
        out,
        "console",
        &toml::Value::try_from(console)?,
        &toml::Value::try_from(crate::config::ConsoleConfig::default())?,
        addr,
    )
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
    section_with(out, name, values, defaults, |_, _| false)
}

/// `section`, where `special` writes the keys it knows its own way (and says so).
fn section_with(
    out: &mut String,
    name: &str,
    values: &toml::Value,
    defaults: &toml::Value,
    special: impl Fn(&mut String, &str) -> bool,
) -> anyhow::Result<()> {
    out.push_str(&format!("\n[{name}]\n"));
    for (key, doc) in section_options(name) {
        comment(out, doc);
        if special(out, key) {
            continue;
        }
        let value = values
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("{name}.{key} is documented but not a field"))?;
        let default = defaults
            .get(key)
            .ok_or_else(|| anyhow::anyhow!("{name}.{key} has no default"))?;
        value_line(out, key, value, default);
    }
    Ok(())
}

/// `key = value`, commented out when it is the default.
fn value_line(out: &mut String, key: &str, value: &toml::Value, default: &toml::Value) {
    if value == default {
        out.push_str(&format!("# {key} = {default}\n"));
    } else {
        out.push_str(&format!("{key} = {value}  # default: {default}\n"));
    }
}

fn quote(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

#[cfg(test)]
mod tests;
