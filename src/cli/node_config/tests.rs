//! Tests of src/cli/node_config.rs: rendered configs, cluster-configs/, Compose and Kubernetes.

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
    assert_eq!(c.console.addr.as_deref(), Some("127.0.0.1:65535"));
    assert_eq!(c.metrics_addr.as_deref(), Some("127.0.0.1:65435"));
    assert_eq!(c.initial_members[0].client_addr, "127.0.0.1:65227");
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
        for port in [
            COMPOSE_CLIENT_PORT,
            COMPOSE_METRICS_PORT,
            COMPOSE_CONSOLE_PORT,
        ] {
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
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
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
