//! Tests of src/config.rs: validation, TOML, old names, the README reference.

use super::*;

fn base() -> Config {
    Config {
        id: 1,
        client_addr: "127.0.0.1:7001".into(),
        metrics_addr: None,
        peer_addr: "127.0.0.1:7101".into(),
        data_dir: "d".into(),
        initial_members: vec![MemberConfig {
            id: 1,
            peer_addr: "127.0.0.1:7101".into(),
            client_addr: "127.0.0.1:7001".into(),
        }],
        raft: RaftConfig::default(),
        limits: Limits::default(),
        locks: LocksConfig::default(),
        operations: OperationsConfig::default(),
        status: StatusConfig::default(),
        pools: PoolsConfig::default(),
        time: TimeConfig::default(),
        etcd: Default::default(),
        console: Default::default(),
        tls: TlsConfig::plaintext(),
    }
}

#[test]
fn defaults_validate() {
    base().validate().expect("valid");
}

/// The election timeouts are the whole wait before a follower campaigns: openraft's lease (its
/// `election_timeout_max`) plus its random timeout. Every valid steward setting gives openraft
/// settings it accepts and whose wait spans `min..=max`; the least min is refused, one more
/// is accepted.
#[test]
fn election_timeouts_are_the_whole_wait_and_openraft_accepts_every_valid_one() {
    let mut valid = 0;
    for heartbeat in [1, 50, 100, 333] {
        for max in (2..=3001).step_by(37) {
            for min in (1..max).step_by(13) {
                let mut c = base();
                c.raft.heartbeat_interval_ms = heartbeat;
                c.raft.election_timeout_ms_min = min;
                c.raft.election_timeout_ms_max = max;
                // Within half of any max here: only the raft rules decide.
                c.time.checkpoint_interval_ms = 1;
                let ours = c.validate();
                let least_min = max / 2 + heartbeat + 1;
                let top = 2 * (max / 2);
                assert_eq!(
                    ours.is_ok(),
                    min >= least_min && min < top,
                    "{heartbeat}/{min}/{max}"
                );
                if ours.is_err() {
                    continue;
                }
                valid += 1;
                let settings = crate::raft::types::raft_settings(&c.raft)
                    .unwrap_or_else(|e| panic!("{heartbeat}/{min}/{max}: openraft refused: {e}"));
                let lease = settings.election_timeout_max;
                assert_eq!(lease + settings.election_timeout_min, min);
                assert!(lease + settings.election_timeout_max <= max);
                assert!(lease + settings.election_timeout_max + 1 >= max);
            }
        }
    }
    assert!(valid > 1000, "{valid} valid settings tried");

    let mut c = base();
    let r = &mut c.raft;
    r.election_timeout_ms_min = r.election_timeout_ms_max / 2 + r.heartbeat_interval_ms;
    let err = c.validate().expect_err("at the limit").to_string();
    assert!(
        err.contains("raft.election_timeout_ms_min") && err.contains("max / 2"),
        "{err}"
    );
    c.raft.election_timeout_ms_min += 1;
    c.validate().expect("one over the limit");

    // An odd max tops out one below it (twice the lease, rounded down).
    c.raft.election_timeout_ms_max = 2001;
    c.raft.election_timeout_ms_min = 2000;
    let err = c
        .validate()
        .expect_err("no room below twice the lease")
        .to_string();
    assert!(err.contains("raft.election_timeout_ms_max"), "{err}");
    c.raft.election_timeout_ms_min = 1999;
    c.validate().expect("room for one ms");
}

#[test]
fn each_rule_names_its_field() {
    type Mutate = fn(&mut Config);
    let cases: Vec<(Mutate, &str)> = vec![
        (|c| c.id = 0, "id"),
        (|c| c.client_addr = "nope".into(), "client_addr"),
        (|c| c.peer_addr = c.client_addr.clone(), "peer_addr"),
        (|c| c.metrics_addr = Some("nope".into()), "metrics_addr"),
        (
            |c| c.metrics_addr = Some(c.peer_addr.clone()),
            "metrics_addr",
        ),
        (|c| c.console.addr = Some("nope".into()), "console.addr"),
        (
            |c| c.console.addr = Some(c.client_addr.clone()),
            "console.addr",
        ),
        (|c| c.console.streams_max = 0, "console.streams_max"),
        (
            |c| c.console.update_interval_ms = 10,
            "console.update_interval_ms",
        ),
        (|c| c.console.page_rows = 0, "console.page_rows"),
        (|c| c.initial_members[0].id = 2, "initial_members"),
        (
            |c| c.raft.election_timeout_ms_min = 50,
            "raft.election_timeout_ms_min",
        ),
        (
            |c| c.raft.election_timeout_ms_max = 100,
            "raft.election_timeout_ms_max",
        ),
        (
            |c| c.time.checkpoint_interval_ms = c.raft.election_timeout_ms_max / 2 + 1,
            "time.checkpoint_interval_ms",
        ),
        (
            |c| c.limits.list_page_default = 5000,
            "limits.list_page_default",
        ),
        (
            |c| c.limits.request_bytes_max = 1,
            "limits.request_bytes_max",
        ),
        (
            |c| c.operations.attempts_default = 99,
            "operations.attempts_default",
        ),
        (|c| c.operations.workers_max = 0, "operations.workers_max"),
        (|c| c.status.items_max = 0, "status.items_max"),
        (
            |c| c.status.query_resources_max = 0,
            "status.query_resources_max",
        ),
        (
            |c| c.operations.decommission_verb = "backup".into(),
            "operations.decommission_verb",
        ),
        (
            |c| {
                let too_long = c.operations.deadline_ms_max + 1;
                c.operations
                    .verb_deadline_ms_default
                    .insert("backup".into(), too_long);
            },
            "operations.verb_deadline_ms_default",
        ),
        (
            |c| {
                c.operations
                    .verb_deadline_ms_default
                    .insert("Bad Verb".into(), 1);
            },
            "operations.verb_deadline_ms_default",
        ),
        (
            |c| c.limits.client_requests_per_second = 0,
            "limits.client_requests_per_second",
        ),
        (
            |c| c.limits.client_request_burst = 0,
            "limits.client_request_burst",
        ),
        (|c| c.limits.client_calls_max = 0, "limits.client_calls_max"),
        (|c| c.limits.quota_bytes = 1 << 19, "limits.quota_bytes"),
        (
            |c| c.limits.command_bytes_max = c.limits.request_bytes_max - 1,
            "limits.command_bytes_max",
        ),
        (
            |c| c.limits.peer_message_bytes_max -= 1,
            "limits.peer_message_bytes_max",
        ),
        (
            |c| c.raft.payload_entries_max = 1024,
            "limits.peer_message_bytes_max",
        ),
        (
            |c| c.limits.space_check_interval_ms = 0,
            "limits.space_check_interval_ms",
        ),
        (|c| c.tls = TlsConfig::default(), "tls.ca_file"),
        (
            |c| {
                c.tls = TlsConfig {
                    ca_file: Some("ca.pem".into()),
                    cert_file: Some("n.pem".into()),
                    ..TlsConfig::default()
                }
            },
            "tls.key_file",
        ),
        (|c| c.tls.cert_file = Some("n.pem".into()), "tls.cert_file"),
        (
            |c| c.tls.client_cert_required = true,
            "tls.client_cert_required",
        ),
    ];
    for (mutate, field) in cases {
        let mut c = base();
        mutate(&mut c);
        let err = c.validate().expect_err(field).to_string();
        assert!(err.contains(field), "{err} should name {field}");
    }
}

#[test]
fn tls_is_on_unless_plaintext_is_asked_for() {
    let head =
        "id = 1\nclient_addr = \"127.0.0.1:1\"\npeer_addr = \"127.0.0.1:2\"\ndata_dir = \"d\"\n";
    let bare: Config = toml::from_str(head).expect("parse");
    let err = bare.validate().expect_err("no tls section").to_string();
    assert!(
        err.contains("tls.ca_file") && err.contains("plaintext"),
        "{err}"
    );
    let plain: Config = toml::from_str(&format!("{head}[tls]\nplaintext = true\n")).expect("parse");
    plain.validate().expect("plaintext asked for");
    let files = "[tls]\nca_file = \"ca.pem\"\ncert_file = \"n.pem\"\nkey_file = \"n-key.pem\"\nclient_cert_required = true\n";
    let secure: Config = toml::from_str(&format!("{head}{files}")).expect("parse");
    secure.validate().expect("certificates named");
    assert!(secure.tls.client_cert_required);
}

#[test]
fn toml_round_trip_and_unknown_fields_refused() {
    let text = toml::to_string(&base()).expect("serialize");
    let back: Config = toml::from_str(&text).expect("parse");
    assert_eq!(back, base());
    let bad = format!("bogus = 1\n{text}");
    assert!(toml::from_str::<Config>(&bad).is_err());
    let mut custom = base();
    custom.operations.read_lock_verbs = vec!["backup".into(), "snapshot".into()];
    custom.operations.verb_deadline_ms_default = [("backup".to_string(), 21_600_000)].into();
    let text = toml::to_string(&custom).expect("serialize");
    assert!(text.contains("[operations]"), "{text}");
    assert_eq!(toml::from_str::<Config>(&text).expect("parse"), custom);
    // As an operator writes it in a node config.
    let inline = "[operations]\nverb_deadline_ms_default = { backup = 21600000, bind = 0 }\n";
    let head = "id = 1\nclient_addr = \"a:1\"\npeer_addr = \"a:2\"\ndata_dir = \"d\"\n";
    let ops: Config = toml::from_str(&format!("{head}{inline}")).expect("inline");
    assert_eq!(
        ops.operations.verb_deadline_ms_default.get("backup"),
        Some(&21_600_000)
    );
}

// ---- old names (renamed::RENAMED) ----

const HEAD: &str = "id = 1\nclient_addr = \"127.0.0.1:1\"\npeer_addr = \"127.0.0.1:2\"\ndata_dir = \"d\"\n[tls]\nplaintext = true\n";

fn parse(text: &str) -> Result<(Config, Vec<renamed::OldName>), ConfigError> {
    Config::from_toml(text, Path::new("node.toml"))
}

#[test]
fn old_names_are_read_as_the_new_ones() {
    let text = format!(
        "{HEAD}[raft]\nelection_timeout_min_ms = 900\nelection_timeout_max_ms = 1200\n\
         max_in_snapshot_log_to_keep = 7\nmax_payload_entries = 64\n\
         [limits]\nmax_object_bytes = 4096\nmax_request_bytes = 16384\nmax_list_page = 50\n\
         default_list_page = 10\nmax_txn_ops = 4\nmax_watchers = 9\nmax_pending_proposals = 11\n\
         [operations]\nmax_attempts = 5\ndeadline_ms = 60000\n\
         verb_deadline_ms = {{ backup = 120000 }}\n"
    );
    let (config, old) = parse(&text).expect("old names accepted");
    let r = &config.raft;
    assert_eq!(
        (
            r.election_timeout_ms_min,
            r.election_timeout_ms_max,
            r.log_behind_snapshot_max,
            r.payload_entries_max
        ),
        (900, 1200, 7, 64)
    );
    let l = &config.limits;
    assert_eq!(
        (
            l.object_bytes_max,
            l.request_bytes_max,
            l.list_page_max,
            l.list_page_default,
            l.txn_ops_max,
            l.watchers_max,
            l.pending_proposals_max
        ),
        (4096, 16384, 50, 10, 4, 9, 11)
    );
    let o = &config.operations;
    assert_eq!((o.attempts_default, o.deadline_ms_default), (5, 60_000));
    assert_eq!(
        o.verb_deadline_ms_default.get("backup"),
        Some(&120_000),
        "{o:?}"
    );
    let found: Vec<(&str, &str)> = old.iter().map(|o| (o.old, o.new)).collect();
    assert_eq!(found, renamed::RENAMED, "every old name is reported, once");
    // Values not named keep their defaults; the old-named config is the same as the new-named one.
    let new_text = toml::to_string(&config).expect("serialize");
    let (again, none) = parse(&new_text).expect("new names");
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(again, config);
    assert_eq!(config.locks, LocksConfig::default());
}

#[test]
fn an_old_name_warns_naming_the_new_one() {
    let (_, old) = parse(&format!("{HEAD}[operations]\nmax_attempts = 5\n")).expect("parse");
    assert_eq!(
        old.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["config key operations.max_attempts is an old name, read as operations.attempts_default: \
          write operations.attempts_default instead"]
    );
    // `load` logs it once, as a warning, at startup.
    let dir = std::env::temp_dir().join(format!("steward-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("node.toml");
    std::fs::write(
        &file,
        format!("{HEAD}[limits]\nmax_object_bytes = 4096\nmax_request_bytes = 8192\n"),
    )
    .expect("write");
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    let config = tracing::subscriber::with_default(subscriber, || Config::load(&file));
    std::fs::remove_dir_all(&dir).expect("rmdir");
    let config = config.expect("loaded");
    assert_eq!(config.limits.object_bytes_max, 4096);
    let text = logs.text();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(warnings.len(), 2, "{text}");
    assert!(
        warnings[0].contains(
            "config key limits.max_object_bytes is an old name, read as limits.object_bytes_max: \
             write limits.object_bytes_max instead"
        ),
        "{text}"
    );
    assert!(
        warnings[1].contains("limits.max_request_bytes") && warnings[1].contains("node.toml"),
        "{text}"
    );
}

/// A tracing writer that keeps what is written, for the warning test.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

#[test]
fn both_names_of_one_option_are_refused() {
    for (old, new) in renamed::RENAMED {
        let (section, old_key) = old.split_once('.').expect("dotted");
        let (_, new_key) = new.split_once('.').expect("dotted");
        let value = match *new {
            "operations.verb_deadline_ms_default" => "{}",
            _ => "1000",
        };
        let text = format!("{HEAD}[{section}]\n{old_key} = {value}\n{new_key} = {value}\n");
        let err = parse(&text).expect_err(old).to_string();
        assert_eq!(
            err,
            format!(
                "config node.toml: both {old} (its old name) and {new} are set; keep only {new}"
            )
        );
    }
}

#[test]
fn renamed_keys_follow_the_options() {
    let mut olds = std::collections::BTreeSet::new();
    for (old, new) in renamed::RENAMED {
        assert!(olds.insert(*old), "{old} twice");
        assert!(options::option(new).is_some(), "{new} is not an option");
        assert!(options::option(old).is_none(), "{old} is still an option");
        assert_eq!(
            old.split_once('.').map(|s| s.0),
            new.split_once('.').map(|s| s.0),
            "{old} -> {new}: a rename stays in its section"
        );
    }
}

// ---- the one reference: config::options ----

/// Every key of a config with every optional field set, dotted, in file order.
fn config_keys() -> Vec<String> {
    let mut full = base();
    full.metrics_addr = Some("127.0.0.1:7201".into());
    full.console.addr = Some("127.0.0.1:7301".into());
    full.tls = TlsConfig {
        plaintext: false,
        ca_file: Some("ca.pem".into()),
        cert_file: Some("n.pem".into()),
        key_file: Some("n-key.pem".into()),
        client_cert_required: true,
    };
    let value = toml::Value::try_from(&full).expect("serialize");
    let mut keys = Vec::new();
    for (key, value) in value.as_table().expect("table") {
        match value {
            toml::Value::Table(section) => {
                keys.extend(section.keys().map(|k| format!("{key}.{k}")));
            }
            _ => keys.push(key.clone()),
        }
    }
    keys
}

#[test]
fn every_option_is_documented_once() {
    let documented: Vec<String> = options::OPTIONS.iter().map(|o| o.key.to_string()).collect();
    let mut want = config_keys();
    let mut got = documented.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "config::options and the Config structs differ");
    got.dedup();
    assert_eq!(got.len(), documented.len(), "a key documented twice");
    for option in options::OPTIONS {
        assert!(
            !option.doc.contains('|') && !option.doc.contains('\n') && !option.doc.is_empty(),
            "{}: one line, no `|` (README table)",
            option.key
        );
        // Top-level keys have no Default to take theirs from; the others must not repeat it.
        assert_eq!(
            option.default.is_some(),
            !option.key.contains('.'),
            "{}",
            option.key
        );
    }
}

/// The generated part of README's "## Configuration" section: between these two lines.
const README_BEGIN: &str = "<!-- generated from src/config/options.rs: STEWARD_BLESS_README=1 cargo test --lib config::tests::readme -->";
const README_END: &str = "<!-- end of generated configuration reference -->";

/// README's configuration reference, as `options` writes it: the table of every option, and
/// the old names still read.
fn readme_reference() -> String {
    let mut out = format!("\n{}", options::reference_table().expect("table"));
    out.push_str("\nOld names, still read with a warning naming the new one (a file that sets both is refused):\n\n");
    out.push_str("| old name | new name |\n|---|---|\n");
    for (old, new) in renamed::RENAMED {
        out.push_str(&format!("| `{old}` | `{new}` |\n"));
    }
    out.push('\n');
    out
}

/// Fails when README's configuration reference and `config::options` (or the defaults) differ:
/// a key missing, a stale key, another default or meaning.
/// `STEWARD_BLESS_README=1 cargo test --lib config::tests::readme` rewrites it.
#[test]
fn readme_configuration_reference_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let section_start = readme
        .find("\n## Configuration\n")
        .expect("README has a Configuration section");
    let section_end = readme[section_start + 1..]
        .find("\n## ")
        .map_or(readme.len(), |i| section_start + 1 + i);
    let section = &readme[section_start..section_end];
    let begin = section
        .find(README_BEGIN)
        .map(|i| section_start + i + README_BEGIN.len() + 1)
        .expect("the generated-reference marker in README's Configuration section");
    let end = readme[begin..]
        .find(README_END)
        .map(|i| begin + i)
        .filter(|&e| e < section_end)
        .expect("the end marker in README's Configuration section");
    let want = readme_reference();
    if std::env::var_os("STEWARD_BLESS_README").is_some() && readme[begin..end] != want {
        let text = format!("{}{want}{}", &readme[..begin], &readme[end..]);
        std::fs::write(&path, text).expect("write README.md");
        panic!("README.md rewritten; run the test again without STEWARD_BLESS_README");
    }
    let got = &readme[begin..end];
    assert!(
        got == want,
        "README.md's configuration reference is stale; rewrite it with \
         STEWARD_BLESS_README=1 cargo test --lib config::tests::readme\n--- README\n{got}\n--- options\n{want}"
    );
    // And no other table row in the section names a config key of its own.
    let rows = section.lines().filter(|l| l.starts_with("| `")).count();
    assert_eq!(
        rows,
        options::OPTIONS.len() + renamed::RENAMED.len(),
        "README's Configuration section has rows besides the generated ones"
    );
}

#[test]
fn etcd_auto_compaction_parses_as_etcds_flags_and_names_the_field_when_wrong() {
    use crate::config::{AutoCompaction, EtcdConfig};
    let parse = |mode: &str, retention: &str| {
        EtcdConfig {
            auto_compaction_mode: mode.into(),
            auto_compaction_retention: retention.into(),
            ..EtcdConfig::default()
        }
        .auto_compaction()
    };
    assert_eq!(parse("", "").unwrap(), None);
    assert_eq!(
        parse("periodic", "1").unwrap(),
        Some(AutoCompaction::Periodic {
            retention_ms: 3_600_000
        })
    );
    assert_eq!(
        parse("periodic", "30m").unwrap(),
        Some(AutoCompaction::Periodic {
            retention_ms: 1_800_000
        })
    );
    assert_eq!(
        parse("revision", "1000").unwrap(),
        Some(AutoCompaction::Revision { keep: 1000 })
    );
    for (mode, retention, field) in [
        ("periodic", "", "etcd.auto_compaction_retention"),
        ("periodic", "0s", "etcd.auto_compaction_retention"),
        ("revision", "1h", "etcd.auto_compaction_retention"),
        ("revision", "0", "etcd.auto_compaction_retention"),
        ("daily", "1", "etcd.auto_compaction_mode"),
    ] {
        let err = parse(mode, retention).unwrap_err().to_string();
        assert!(err.contains(field), "{mode} {retention}: {err}");
    }
}
