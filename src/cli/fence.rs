//! `--fence NAME:TOKEN`, the option every resource write command takes: the writes of that
//! command are applied only while TOKEN is a live WRITE holder of lock NAME. Parsed strictly, so
//! a typo fails before anything is sent instead of writing unguarded.

use crate::client::Fence;

/// The fence option, flattened into each resource write command.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FenceArg {
    /// Guard every write of this command with a lock: applied only while TOKEN (from `steward
    /// lock acquire`) still holds lock NAME in WRITE mode; refused with FailedPrecondition
    /// otherwise.
    #[arg(long, value_name = "NAME:TOKEN", value_parser = parse_fence)]
    pub fence: Option<Fence>,
}

/// `NAME:TOKEN` as a fence. The token follows the last `:` (lock names may contain colons) and
/// is a positive decimal integer: tokens start at 1, so 0 can only be a mistake.
pub fn parse_fence(text: &str) -> Result<Fence, String> {
    let (lock, token) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("{text:?} is not NAME:TOKEN (e.g. deploy-42:7)"))?;
    if lock.trim().is_empty() {
        return Err(format!("{text:?}: the lock name is empty"));
    }
    if lock.trim() != lock {
        return Err(format!(
            "{text:?}: the lock name has leading or trailing spaces"
        ));
    }
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{text:?}: the token {token:?} is not a positive integer"
        ));
    }
    let token: u64 = token
        .parse()
        .map_err(|_| format!("{text:?}: the token {token:?} is too large"))?;
    if token == 0 {
        return Err(format!(
            "{text:?}: the token must be at least 1 (tokens start at 1)"
        ));
    }
    Ok(Fence {
        lock: lock.to_string(),
        token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn fences_parse_strictly() {
        let ok = [
            ("deploy-42:7", "deploy-42", 7),
            ("a:b:c:18446744073709551615", "a:b:c", u64::MAX),
            ("x:001", "x", 1),
        ];
        for (text, lock, token) in ok {
            let fence = parse_fence(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((fence.lock.as_str(), fence.token), (lock, token), "{text}");
        }
        let bad = [
            ("deploy-42", "not NAME:TOKEN"),
            (":7", "lock name is empty"),
            ("  :7", "lock name is empty"),
            (" a:7", "leading or trailing spaces"),
            ("a:", "not a positive integer"),
            ("a:-1", "not a positive integer"),
            ("a:+1", "not a positive integer"),
            ("a: 7", "not a positive integer"),
            ("a:7x", "not a positive integer"),
            ("a:0", "at least 1"),
            ("a:18446744073709551616", "too large"),
        ];
        for (text, want) in bad {
            let err = parse_fence(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn resource_writes_take_a_fence() {
        let cli = Cli::try_parse_from([
            "steward",
            "delete",
            "Director",
            "d1",
            "--fence",
            "deploy-1:7",
        ])
        .expect("delete");
        let Command::Delete(args) = cli.command else {
            panic!("not delete")
        };
        let fence = args.fence.fence.expect("fence");
        assert_eq!((fence.lock.as_str(), fence.token), ("deploy-1", 7));

        let cli = Cli::try_parse_from(["steward", "apply", "-f", "x.yaml", "--fence", "a:b:3"])
            .expect("apply");
        let Command::Apply(args) = cli.command else {
            panic!("not apply")
        };
        assert_eq!(args.fence.fence.map(|f| f.lock).as_deref(), Some("a:b"));

        let err = Cli::try_parse_from(["steward", "apply", "-f", "x.yaml", "--fence", "deploy-1"])
            .expect_err("no token");
        assert!(err.to_string().contains("NAME:TOKEN"), "{err}");
    }
}
