//! `steward serve`: run one node. The config comes from `--config FILE`, with flags on top; a
//! node that will join an existing cluster can be started from flags alone.

use std::path::PathBuf;

use crate::config::{Config, Limits, RaftConfig};

#[derive(Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// Node config (TOML). Without it, --id, --client-addr and --peer-addr are required and the
    /// node starts with no initial members, waiting to be added with `steward member add-learner`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Data directory (overrides data_dir; default without --config: ./steward-data/node<ID>).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Client API listen address, host:port (overrides client_addr).
    #[arg(long)]
    pub client_addr: Option<String>,
    /// Peer (Raft) listen address, host:port (overrides peer_addr).
    #[arg(long)]
    pub peer_addr: Option<String>,
    /// Prometheus `/metrics` listen address, host:port (overrides metrics_addr).
    #[arg(long)]
    pub metrics_addr: Option<String>,
    /// Node id (overrides id).
    #[arg(long)]
    pub id: Option<u64>,
    /// CA certificate (PEM) that signed every node's and client's certificate (tls.ca_file).
    #[arg(long)]
    pub tls_ca_file: Option<PathBuf>,
    /// This node's certificate (PEM) (tls.cert_file).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// This node's private key (PEM) (tls.key_file).
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// Serve without TLS (tls.plaintext = true); without it, TLS certificates are required.
    #[arg(long, conflicts_with_all = ["tls_ca_file", "tls_cert_file", "tls_key_file"])]
    pub plaintext: bool,
}

/// `steward serve`: build, validate, run until SIGTERM / Ctrl-C.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = build_config(&args)?;
    config.validate()?;
    tracing::info!(
        id = config.id,
        client_addr = %config.client_addr,
        peer_addr = %config.peer_addr,
        metrics_addr = config.metrics_addr.as_deref().unwrap_or("-"),
        data_dir = %config.data_dir.display(),
        initial_members = config.initial_members.len(),
        "starting node"
    );
    crate::server::serve(config).await
}

/// The config file (if any) with the flags applied on top. Not validated.
pub fn build_config(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => {
            let missing = |flag: &str| anyhow::anyhow!("{flag} is required without --config");
            let id = args.id.ok_or_else(|| missing("--id"))?;
            Config {
                id,
                client_addr: args
                    .client_addr
                    .clone()
                    .ok_or_else(|| missing("--client-addr"))?,
                peer_addr: args
                    .peer_addr
                    .clone()
                    .ok_or_else(|| missing("--peer-addr"))?,
                data_dir: PathBuf::from(format!("./steward-data/node{id}")),
                initial_members: Vec::new(),
                raft: RaftConfig::default(),
                limits: Limits::default(),
                locks: Default::default(),
                operations: Default::default(),
                status: Default::default(),
                pools: Default::default(),
                time: Default::default(),
                etcd: Default::default(),
                console: Default::default(),
                tls: Default::default(),
                metrics_addr: None,
            }
        }
    };
    if let Some(id) = args.id {
        config.id = id;
    }
    if let Some(addr) = &args.client_addr {
        config.client_addr = addr.clone();
    }
    if let Some(addr) = &args.peer_addr {
        config.peer_addr = addr.clone();
    }
    if let Some(addr) = &args.metrics_addr {
        config.metrics_addr = Some(addr.clone());
    }
    if let Some(dir) = &args.data_dir {
        config.data_dir = dir.clone();
    }
    if args.plaintext {
        config.tls = crate::config::TlsConfig::plaintext();
    }
    if let Some(f) = &args.tls_ca_file {
        config.tls.ca_file = Some(f.clone());
    }
    if let Some(f) = &args.tls_cert_file {
        config.tls.cert_file = Some(f.clone());
    }
    if let Some(f) = &args.tls_key_file {
        config.tls.key_file = Some(f.clone());
    }
    if args.tls_ca_file.is_some() || args.tls_cert_file.is_some() || args.tls_key_file.is_some() {
        config.tls.plaintext = false;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_alone_make_a_joining_node() {
        let args = ServeArgs {
            id: Some(4),
            client_addr: Some("127.0.0.1:7004".into()),
            peer_addr: Some("127.0.0.1:7104".into()),
            ..ServeArgs::default()
        };
        let config = build_config(&args).expect("config");
        assert!(config.initial_members.is_empty());
        assert_eq!(config.data_dir, PathBuf::from("./steward-data/node4"));
        let err = config
            .validate()
            .expect_err("no TLS, no --plaintext")
            .to_string();
        assert!(err.contains("tls.ca_file"), "{err}");
        let plain = build_config(&ServeArgs {
            plaintext: true,
            ..args
        })
        .expect("config");
        plain.validate().expect("valid");
    }

    #[test]
    fn flags_without_a_config_name_what_is_missing() {
        let args = ServeArgs {
            id: Some(4),
            ..ServeArgs::default()
        };
        let err = build_config(&args).expect_err("incomplete").to_string();
        assert!(err.contains("--client-addr"), "{err}");
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("node1.toml");
        let config = super::super::node_config::loopback_config(1, 3, std::path::Path::new("d"));
        std::fs::write(&path, toml::to_string(&config).expect("toml")).expect("write");
        let args = ServeArgs {
            config: Some(path),
            data_dir: Some("elsewhere".into()),
            ..ServeArgs::default()
        };
        let built = build_config(&args).expect("config");
        assert_eq!(built.data_dir, PathBuf::from("elsewhere"));
        assert_eq!(built.initial_members.len(), 3);
    }
}
