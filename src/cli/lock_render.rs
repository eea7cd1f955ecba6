//! How `steward lock ...` prints grants, lock state and lock events: tables for people, JSON and
//! YAML (proto field names in lowerCamelCase, raw millisecond times, details as JSON) for
//! programs. Pure; no I/O, no clock.
//!
//! Times on the wire are leader-stamped milliseconds since the Unix epoch. Tables show them
//! relative to the state machine's time in the same reply (`now_ms`), never to this machine's
//! clock, so a skewed client clock cannot make a live lock look expired.

use serde_json::{json, Value};

use super::render::{human_duration, Table};
use crate::client::{
    ListLocksReply, LockEventMessage, LockEventType, LockGrant, LockHolderInfo, LockInfo, LockMode,
    LockWaiterInfo,
};

/// Longest DETAILS cell; the rest is cut (`-o json` has it all).
const DETAILS_CELL_CHARS_MAX: usize = 60;
/// Tokens shown in one TOKENS cell of `lock list` before the rest is counted.
const TOKENS_CELL_MAX: usize = 4;

/// `READ` / `WRITE` (the proto name without its prefix), or the raw number of a mode this build
/// does not know.
pub fn mode_name(mode: i32) -> String {
    LockMode::try_from(mode)
        .map(|m| m.as_str_name().trim_start_matches("LOCK_MODE_").to_string())
        .unwrap_or_else(|_| format!("MODE({mode})"))
}

fn event_type_name(event_type: i32) -> String {
    LockEventType::try_from(event_type)
        .map(|t| {
            t.as_str_name()
                .trim_start_matches("LOCK_EVENT_TYPE_")
                .to_string()
        })
        .unwrap_or_else(|_| format!("EVENT({event_type})"))
}

/// A span of milliseconds, short: `250ms` below a second, kubectl style above (`29s`, `3m20s`).
fn span(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        human_duration(std::time::Duration::from_millis(ms))
    }
}

/// A past or future instant relative to `now_ms`: `12s ago` or `in 3s`.
pub fn ago(at_ms: u64, now_ms: u64) -> String {
    if at_ms > now_ms {
        format!("in {}", span(at_ms - now_ms))
    } else {
        format!("{} ago", span(now_ms - at_ms))
    }
}

/// A deadline relative to `now_ms`: `never` (0), `in 29s`, or `expired 2s ago`.
pub fn expiry(at_ms: u64, now_ms: u64) -> String {
    if at_ms == 0 {
        "never".to_string()
    } else if at_ms > now_ms {
        format!("in {}", span(at_ms - now_ms))
    } else {
        format!("expired {} ago", span(now_ms - at_ms))
    }
}

/// The expiry of a grant or refresh reply. Such a reply carries no `now_ms`, but it describes
/// the holder as of the entry that set its TTL, when `expires_at_ms - ttl_ms` was the state
/// machine's time, so the expiry is the TTL from then.
pub fn grant_expiry(holder: &LockHolderInfo) -> String {
    let now_ms = if holder.ttl_ms > 0 {
        holder.expires_at_ms.saturating_sub(holder.ttl_ms)
    } else {
        holder.granted_at_ms
    };
    expiry(holder.expires_at_ms, now_ms)
}

/// NAME HOLDER MODE TOKEN EXPIRES: what acquire and refresh print.
pub fn grant_table(grant: &LockGrant) -> Table {
    let mut table = Table::new(&["NAME", "HOLDER", "MODE", "TOKEN", "EXPIRES"]);
    let holder = grant.holder.clone().unwrap_or_default();
    table.row(vec![
        grant.name.clone(),
        holder.holder.clone(),
        mode_name(holder.mode),
        holder.token.to_string(),
        grant_expiry(&holder),
    ]);
    table
}

/// `lock get` as text: the name, the lock-delay if one is recorded, the holders table
/// (HOLDER MODE TOKEN GRANTED EXPIRES-IN DETAILS) and, when anyone waits, the waiters table
/// (WAITER MODE WAIT-ID QUEUED WAIT-UNTIL) in queue order.
pub fn lock_text(info: &LockInfo) -> String {
    let now = info.now_ms;
    let mut out = format!("Name:        {}\n", info.name);
    if info.delay_until_ms != 0 {
        let delay = if info.delay_until_ms > now {
            format!("ends in {}", span(info.delay_until_ms - now))
        } else {
            format!("ended {} ago", span(now - info.delay_until_ms))
        };
        out.push_str(&format!("Lock-delay:  {delay}\n"));
    }
    out.push('\n');
    let mut holders = Table::new(&[
        "HOLDER",
        "MODE",
        "TOKEN",
        "GRANTED",
        "EXPIRES-IN",
        "DETAILS",
    ]);
    for h in &info.holders {
        holders.row(vec![
            h.holder.clone(),
            mode_name(h.mode),
            h.token.to_string(),
            ago(h.granted_at_ms, now),
            expiry(h.expires_at_ms, now),
            details_cell(&h.details_json),
        ]);
    }
    out.push_str(&holders.render());
    if !info.waiters.is_empty() {
        let mut waiters = Table::new(&["WAITER", "MODE", "WAIT-ID", "QUEUED", "WAIT-UNTIL"]);
        for w in &info.waiters {
            waiters.row(vec![
                w.holder.clone(),
                mode_name(w.mode),
                w.wait_id.to_string(),
                ago(w.queued_at_ms, now),
                expiry(w.wait_until_ms, now),
            ]);
        }
        out.push('\n');
        out.push_str(&waiters.render());
    }
    out
}

/// NAME MODE HOLDERS WAITERS TOKENS DELAY, one row per lock, for `lock list`.
pub fn list_table(reply: &ListLocksReply) -> Table {
    let mut table = Table::new(&["NAME", "MODE", "HOLDERS", "WAITERS", "TOKENS", "DELAY"]);
    for lock in &reply.locks {
        let now = lock.now_ms.max(reply.now_ms);
        let mode = if lock
            .holders
            .iter()
            .any(|h| h.mode == LockMode::Write as i32)
        {
            mode_name(LockMode::Write as i32)
        } else if let Some(h) = lock.holders.first() {
            mode_name(h.mode)
        } else {
            "<none>".to_string()
        };
        let delay = if lock.delay_until_ms > now {
            format!("in {}", span(lock.delay_until_ms - now))
        } else {
            "<none>".to_string()
        };
        table.row(vec![
            lock.name.clone(),
            mode,
            lock.holders.len().to_string(),
            lock.waiters.len().to_string(),
            tokens_cell(&lock.holders),
            delay,
        ]);
    }
    table
}

/// One lock event as a line: `GRANTED lock-a holder=x mode=WRITE token=7`, with `wait_id=N`
/// when the event concerns a queued acquire.
pub fn event_line(event: &LockEventMessage) -> String {
    let mut line = format!(
        "{} {} holder={} mode={}",
        event_type_name(event.r#type),
        event.name,
        event.holder,
        mode_name(event.mode)
    );
    if event.token != 0 {
        line.push_str(&format!(" token={}", event.token));
    }
    if event.wait_id != 0 {
        line.push_str(&format!(" wait_id={}", event.wait_id));
    }
    line.push('\n');
    line
}

/// One lock event as one line of JSON. Written by hand so the keys come in the documented
/// order: type, name, holder, mode, token, waitId, timeMs.
pub fn event_json_line(event: &LockEventMessage) -> String {
    let text = |s: &str| Value::String(s.to_string()).to_string();
    format!(
        "{{\"type\":{},\"name\":{},\"holder\":{},\"mode\":{},\"token\":{},\"waitId\":{},\"timeMs\":{}}}\n",
        text(&event_type_name(event.r#type)),
        text(&event.name),
        text(&event.holder),
        text(&mode_name(event.mode)),
        event.token,
        event.wait_id,
        event.time_ms
    )
}

/// A lock event as a JSON value (for YAML).
pub fn event_json(event: &LockEventMessage) -> Value {
    json!({
        "type": event_type_name(event.r#type),
        "name": event.name,
        "holder": event.holder,
        "mode": mode_name(event.mode),
        "token": event.token,
        "waitId": event.wait_id,
        "timeMs": event.time_ms,
    })
}

/// A grant as JSON.
pub fn grant_json(grant: &LockGrant) -> Value {
    json!({
        "name": grant.name,
        "holder": grant.holder.as_ref().map(holder_json),
    })
}

/// A lock's full state as JSON, with every time as raw leader milliseconds.
pub fn lock_json(info: &LockInfo) -> Value {
    json!({
        "name": info.name,
        "holders": info.holders.iter().map(holder_json).collect::<Vec<_>>(),
        "waiters": info.waiters.iter().map(waiter_json).collect::<Vec<_>>(),
        "delayUntilMs": info.delay_until_ms,
        "nowMs": info.now_ms,
    })
}

/// `lock list` as JSON.
pub fn list_json(reply: &ListLocksReply) -> Value {
    json!({
        "locks": reply.locks.iter().map(lock_json).collect::<Vec<_>>(),
        "nowMs": reply.now_ms,
    })
}

fn holder_json(h: &LockHolderInfo) -> Value {
    json!({
        "holder": h.holder,
        "mode": mode_name(h.mode),
        "token": h.token,
        "grantedAtMs": h.granted_at_ms,
        "ttlMs": h.ttl_ms,
        "expiresAtMs": h.expires_at_ms,
        "details": details_value(&h.details_json),
    })
}

fn waiter_json(w: &LockWaiterInfo) -> Value {
    json!({
        "holder": w.holder,
        "mode": mode_name(w.mode),
        "waitId": w.wait_id,
        "queuedAtMs": w.queued_at_ms,
        "waitUntilMs": w.wait_until_ms,
        "details": details_value(&w.details_json),
    })
}

/// Details as the JSON they are: null when absent, the text itself if it is not JSON.
fn details_value(text: &str) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Details in one table cell: compact JSON, cut at `DETAILS_CELL_CHARS_MAX` characters.
fn details_cell(text: &str) -> String {
    let compact = match details_value(text) {
        Value::Null => return String::new(),
        Value::String(s) if s == text => s,
        value => value.to_string(),
    };
    if compact.chars().count() <= DETAILS_CELL_CHARS_MAX {
        return compact;
    }
    let mut cut: String = compact.chars().take(DETAILS_CELL_CHARS_MAX - 3).collect();
    cut.push_str("...");
    cut
}

/// `7` or `3,4,5,6,+2`: the holders' tokens, the first few of many.
fn tokens_cell(holders: &[LockHolderInfo]) -> String {
    if holders.is_empty() {
        return "<none>".to_string();
    }
    let mut cell = holders
        .iter()
        .take(TOKENS_CELL_MAX)
        .map(|h| h.token.to_string())
        .collect::<Vec<_>>()
        .join(",");
    if holders.len() > TOKENS_CELL_MAX {
        cell.push_str(&format!(",+{}", holders.len() - TOKENS_CELL_MAX));
    }
    cell
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    fn holder(
        name: &str,
        mode: LockMode,
        token: u64,
        granted_ago_ms: u64,
        ttl_ms: u64,
    ) -> LockHolderInfo {
        let granted_at_ms = NOW - granted_ago_ms;
        LockHolderInfo {
            holder: name.to_string(),
            mode: mode as i32,
            token,
            granted_at_ms,
            ttl_ms,
            expires_at_ms: if ttl_ms == 0 {
                0
            } else {
                granted_at_ms + ttl_ms
            },
            details_json: String::new(),
        }
    }

    #[test]
    fn times_read_relative_to_the_leader() {
        assert_eq!(expiry(0, NOW), "never");
        assert_eq!(expiry(NOW + 29_400, NOW), "in 29s");
        assert_eq!(expiry(NOW + 250, NOW), "in 250ms");
        assert_eq!(expiry(NOW - 2_000, NOW), "expired 2s ago");
        assert_eq!(expiry(NOW, NOW), "expired 0ms ago");
        assert_eq!(expiry(NOW + 200_000, NOW), "in 3m20s");
        assert_eq!(ago(NOW - 12_000, NOW), "12s ago");
        assert_eq!(ago(NOW + 1_000, NOW), "in 1s");
    }

    #[test]
    fn grants_expire_a_ttl_after_they_were_set() {
        let mut h = holder("x", LockMode::Write, 7, 0, 30_000);
        assert_eq!(grant_expiry(&h), "in 30s");
        // A refresh long after the grant: expiry counts from the refresh, not the grant.
        h.granted_at_ms = NOW - 600_000;
        assert_eq!(grant_expiry(&h), "in 30s");
        assert_eq!(grant_expiry(&holder("x", LockMode::Read, 1, 0, 0)), "never");
        let grant = LockGrant {
            name: "lock-a".into(),
            holder: Some(holder("backup@10.0.2.2", LockMode::Write, 7, 0, 30_000)),
        };
        assert_eq!(
            grant_table(&grant).render(),
            "NAME     HOLDER            MODE    TOKEN   EXPIRES\n\
             lock-a   backup@10.0.2.2   WRITE   7       in 30s\n"
        );
        let value = grant_json(&grant);
        assert_eq!(value["holder"]["token"], 7);
        assert_eq!(value["holder"]["mode"], "WRITE");
        assert_eq!(value["holder"]["details"], Value::Null);
    }

    #[test]
    fn lock_get_shows_holders_waiters_and_delay() {
        let mut h = holder("backup", LockMode::Write, 7, 12_000, 30_000);
        h.details_json = r#"{"resourceId":"d1","operation":"backup"}"#.into();
        let info = LockInfo {
            name: "deploy-1".into(),
            holders: vec![h, holder("late", LockMode::Write, 5, 40_000, 38_000)],
            waiters: vec![LockWaiterInfo {
                holder: "restore".into(),
                mode: LockMode::Read as i32,
                wait_id: 3,
                queued_at_ms: NOW - 5_000,
                wait_until_ms: NOW + 5_000,
                details_json: String::new(),
            }],
            delay_until_ms: NOW + 3_000,
            now_ms: NOW,
        };
        assert_eq!(
            lock_text(&info),
            "Name:        deploy-1\n\
             Lock-delay:  ends in 3s\n\
             \n\
             HOLDER   MODE    TOKEN   GRANTED   EXPIRES-IN       DETAILS\n\
             backup   WRITE   7       12s ago   in 18s           {\"operation\":\"backup\",\"resourceId\":\"d1\"}\n\
             late     WRITE   5       40s ago   expired 2s ago\n\
             \n\
             WAITER    MODE   WAIT-ID   QUEUED   WAIT-UNTIL\n\
             restore   READ   3         5s ago   in 5s\n"
        );
        let value = lock_json(&info);
        assert_eq!(value["holders"][0]["details"]["resourceId"], "d1");
        assert_eq!(value["holders"][0]["expiresAtMs"], NOW + 18_000);
        assert_eq!(value["waiters"][0]["waitId"], 3);
        assert_eq!(value["delayUntilMs"], NOW + 3_000);
        assert_eq!(value["nowMs"], NOW);
    }

    #[test]
    fn a_lock_without_waiters_or_delay_prints_holders_only() {
        let info = LockInfo {
            name: "a".into(),
            holders: vec![holder("x", LockMode::Read, 1, 0, 0)],
            now_ms: NOW,
            ..LockInfo::default()
        };
        let text = lock_text(&info);
        assert!(
            !text.contains("Lock-delay") && !text.contains("WAITER"),
            "{text}"
        );
        assert!(
            text.ends_with("x        READ   1       0ms ago   never\n"),
            "{text}"
        );
    }

    #[test]
    fn lock_lists_have_one_row_per_lock() {
        let readers: Vec<_> = (1..=6)
            .map(|t| holder(&format!("r{t}"), LockMode::Read, t, 1_000, 0))
            .collect();
        let reply = ListLocksReply {
            locks: vec![
                LockInfo {
                    name: "readers".into(),
                    holders: readers,
                    now_ms: NOW,
                    ..LockInfo::default()
                },
                LockInfo {
                    name: "writer".into(),
                    holders: vec![holder("w", LockMode::Write, 9, 1_000, 30_000)],
                    waiters: vec![LockWaiterInfo::default(), LockWaiterInfo::default()],
                    now_ms: NOW,
                    ..LockInfo::default()
                },
                LockInfo {
                    name: "delayed".into(),
                    delay_until_ms: NOW + 4_000,
                    now_ms: NOW,
                    ..LockInfo::default()
                },
            ],
            now_ms: NOW,
        };
        assert_eq!(
            list_table(&reply).render(),
            "NAME      MODE     HOLDERS   WAITERS   TOKENS       DELAY\n\
             readers   READ     6         0         1,2,3,4,+2   <none>\n\
             writer    WRITE    1         2         9            <none>\n\
             delayed   <none>   0         0         <none>       in 4s\n"
        );
        assert_eq!(list_json(&reply)["locks"][2]["delayUntilMs"], NOW + 4_000);
    }

    #[test]
    fn long_details_are_cut_in_tables_only() {
        let long = format!("{{\"k\":\"{}\"}}", "v".repeat(100));
        let cell = details_cell(&long);
        assert_eq!(cell.chars().count(), DETAILS_CELL_CHARS_MAX);
        assert!(cell.ends_with("..."), "{cell}");
        assert_eq!(details_cell("not json"), "not json");
        assert_eq!(details_value("not json"), Value::String("not json".into()));
    }

    #[test]
    fn events_print_as_lines_or_json() {
        let granted = LockEventMessage {
            r#type: LockEventType::Granted as i32,
            name: "lock-a".into(),
            holder: "x".into(),
            mode: LockMode::Write as i32,
            token: 7,
            wait_id: 0,
            time_ms: NOW,
        };
        assert_eq!(
            event_line(&granted),
            "GRANTED lock-a holder=x mode=WRITE token=7\n"
        );
        let expired_wait = LockEventMessage {
            r#type: LockEventType::WaitExpired as i32,
            token: 0,
            wait_id: 3,
            mode: LockMode::Read as i32,
            ..granted.clone()
        };
        assert_eq!(
            event_line(&expired_wait),
            "WAIT_EXPIRED lock-a holder=x mode=READ wait_id=3\n"
        );
        let line = event_json_line(&granted);
        assert_eq!(
            line,
            format!("{{\"type\":\"GRANTED\",\"name\":\"lock-a\",\"holder\":\"x\",\"mode\":\"WRITE\",\"token\":7,\"waitId\":0,\"timeMs\":{NOW}}}\n")
        );
        let parsed: Value = serde_json::from_str(&line).expect("valid JSON");
        assert_eq!(parsed, event_json(&granted));
        let quoted = LockEventMessage {
            holder: "a\"b".into(),
            ..granted
        };
        let parsed: Value = serde_json::from_str(&event_json_line(&quoted)).expect("escaped");
        assert_eq!(parsed["holder"], "a\"b");
    }
}
