use super::*;
use crate::client::{Member, NodeStatus};

fn members() -> MemberListReply {
    let member = |id: u64, leader: bool, voter: bool| Member {
        id,
        peer_addr: format!("127.0.0.1:710{id}"),
        client_addr: format!("127.0.0.1:700{id}"),
        voter,
        leader,
        term: 3,
        matched_index: 40,
        applied_index: 40,
        lag: 0,
        reachable: true,
    };
    MemberListReply {
        members: vec![member(1, true, true), member(4, false, false)],
        leader_id: 1,
        term: 3,
        last_log_index: 40,
    }
}

#[test]
fn member_tables_mark_the_leader() {
    let text = member_table(&members()).render();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "ID   PEER             CLIENT           ROLE      LEADER   TERM   MATCHED   APPLIED   LAG   REACHABLE"
    );
    assert_eq!(
        lines[1],
        "1    127.0.0.1:7101   127.0.0.1:7001   voter     *        3      40        40        0     yes"
    );
    assert!(
        lines[2].starts_with("4    127.0.0.1:7104   127.0.0.1:7004   learner            3"),
        "{}",
        lines[2]
    );
}

#[test]
fn member_json_uses_proto_names() {
    let value = member_list_json(&members());
    assert_eq!(value["leaderId"], 1);
    assert_eq!(value["members"][1]["voter"], false);
    assert_eq!(value["members"][0]["peerAddr"], "127.0.0.1:7101");
}

#[test]
fn health_tables_show_each_endpoint() {
    let results = vec![
        (
            "https://127.0.0.1:7001".to_string(),
            Ok(ServingStatus::Serving),
        ),
        (
            "https://127.0.0.1:7002".to_string(),
            Ok(ServingStatus::NotServing),
        ),
        (
            "https://127.0.0.1:7003".to_string(),
            Err("Unavailable: tcp connect error".to_string()),
        ),
    ];
    let text = health_table(&results).render();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "ENDPOINT                 HEALTH        ERROR");
    assert_eq!(lines[1], "https://127.0.0.1:7001   serving");
    assert_eq!(lines[2], "https://127.0.0.1:7002   not-serving");
    assert_eq!(
        lines[3],
        "https://127.0.0.1:7003   unreachable   Unavailable: tcp connect error"
    );
    let json = health_json(&results);
    assert_eq!(json["endpoints"][1]["health"], "not-serving");
    assert_eq!(
        json["endpoints"][2]["error"],
        "Unavailable: tcp connect error"
    );
}

#[test]
fn status_tables_show_each_node() {
    let node = NodeStatus {
        id: 2,
        state: "unreachable".into(),
        error: "connection refused".into(),
        ..NodeStatus::default()
    };
    let reply = ClusterStatusReply {
        nodes: vec![node],
        leader_id: 1,
        warnings: vec!["node 2 is unreachable: connection refused".into()],
        alarms: Vec::new(),
    };
    let text = status_table(&reply).render();
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("2") && l.ends_with("connection refused")),
        "{text}"
    );
    assert_eq!(
        cluster_status_json(&reply)["nodes"][0]["state"],
        "unreachable"
    );
    let up = NodeStatus {
        id: 1,
        pid: 4242,
        state: "leader".into(),
        wall_ms: 1_800_000_000_123,
        cluster_ms: 1_799_999_990_456,
        ..NodeStatus::default()
    };
    let reply = ClusterStatusReply {
        nodes: vec![up],
        ..reply
    };
    let text = status_table(&reply).render();
    let row: Vec<&str> = text
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(row[..3], ["1", "4242", "leader"], "{text}");
    let json = cluster_status_json(&reply);
    assert_eq!(json["nodes"][0]["pid"], 4242);
    assert_eq!(json["nodes"][0]["wallMs"], 1_800_000_000_123_u64);
    assert_eq!(json["nodes"][0]["clusterMs"], 1_799_999_990_456_u64);
    assert_eq!(
        cluster_status_json(&reply)["warnings"][0],
        "node 2 is unreachable: connection refused"
    );
}

/// How clap reads member ids and `--to`.
mod ids {
    use clap::Parser;

    use super::super::MemberCommand;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: MemberCommand,
    }

    fn parse(args: &[&str]) -> Result<MemberCommand, clap::Error> {
        let argv = std::iter::once("member").chain(args.iter().copied());
        Cli::try_parse_from(argv).map(|cli| cli.cmd)
    }

    /// The id each command names (`None` for `list` or a transfer without a target).
    fn id_of(cmd: &MemberCommand) -> Option<u64> {
        match cmd {
            MemberCommand::List => None,
            MemberCommand::AddLearner { id, .. }
            | MemberCommand::Promote { id }
            | MemberCommand::Remove { id } => Some(id.get()),
            MemberCommand::TransferLeader { id } => id.positional.or(id.flag),
        }
    }

    #[test]
    fn every_member_command_takes_the_id_positionally_or_as_a_flag() {
        let addrs = [
            "--peer-addr",
            "127.0.0.1:7104",
            "--client-addr",
            "127.0.0.1:7004",
        ];
        for form in [["4"].as_slice(), ["--id", "4"].as_slice()] {
            let with_addrs: Vec<&str> = ["add-learner"]
                .into_iter()
                .chain(form.iter().copied())
                .chain(addrs)
                .collect();
            for args in [
                with_addrs,
                [&["promote"][..], form].concat(),
                [&["remove"][..], form].concat(),
                [&["transfer-leader"][..], form].concat(),
            ] {
                let cmd = parse(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
                assert_eq!(id_of(&cmd), Some(4), "{args:?}");
            }
        }
    }

    #[test]
    fn an_id_is_required_once() {
        for args in [
            &["promote"][..],
            &["remove"],
            &["add-learner", "--peer-addr", "a:1", "--client-addr", "a:2"],
        ] {
            assert!(parse(args).is_err(), "{args:?} parsed without an id");
        }
        for args in [
            &["promote", "4", "--id", "5"][..],
            &["remove", "4", "--id", "4"],
            &["transfer-leader", "2", "--id", "3"],
        ] {
            assert!(parse(args).is_err(), "{args:?} parsed with two ids");
        }
        let cmd = parse(&["transfer-leader"]).expect("transfer-leader without a target");
        assert_eq!(id_of(&cmd), None);
    }
}
