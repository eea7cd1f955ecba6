//! Network namespaces for one run: made with `ip`, always removed.
//!
//! Layout of a run with prefix `P` (e.g. `stw41827a`) and subnet `10.213.K.0/24`:
//! - `P-br`: a namespace holding the Linux bridge `br0`;
//! - `P-n<id>` per node: `lo` and `eth0` (address `10.213.K.<id>/24`), the other end of its veth
//!   pair (`n<id>`) enslaved to `br0`;
//! - `P-h` in the root namespace (address `10.213.K.254/24`), its peer `root` enslaved to `br0`,
//!   so clients in the root namespace reach every node. No namespace gets a default route, so
//!   nothing in them can send outside `10.213.K.0/24`.
//!
//! Who calls it: `cluster::NetCluster` creates one `Network` per run; the runner calls
//! [`cleanup_stale`] at start and selects on [`interrupted`] so Ctrl-C / SIGTERM drops (and so
//! removes) the cluster. Nothing else in the suite runs `ip`.
//!
//! Cleanup is guaranteed three ways: [`Network::cleanup`] (idempotent), `Drop` (also on a panic or
//! an early `?`), and [`cleanup_stale`] for what a killed harness (SIGKILL) left behind: the prefix
//! carries the owner's PID, and namespaces whose owner is gone are removed next time.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use anyhow::Context;

/// Every namespace and root-side interface this suite makes starts with this.
pub const PREFIX_ROOT: &str = "stw";
/// The `/16` the node subnets come from; it exists only inside the namespaces.
const SUBNET_BASE: [u8; 2] = [10, 213];
/// Host part of the root namespace's address on every run subnet.
pub const ROOT_HOST: u8 = 254;
/// Node ids must be usable as the host part of an address (and stay below `ROOT_HOST`).
pub const NODE_ID_MAX: u64 = 253;
/// Linux interface names are at most 15 bytes (IFNAMSIZ - 1).
const IFNAME_BYTES_MAX: usize = 15;
/// The lock that makes "pick a free subnet, then claim it" atomic across processes (in
/// /run/lock, or the temp dir where there is none).
const LOCK_FILE: &str = "steward-jepsen-netns.lock";
/// The exit code the runner uses when namespaces cannot be made.
pub const EXIT_NO_NETNS: i32 = 77;

/// Namespaces cannot be made here (not root, no CAP_NET_ADMIN, no `ip`). The runner maps it to
/// one line and exit code [`EXIT_NO_NETNS`]; find it with `err.downcast_ref::<NetnsUnavailable>()`.
#[derive(Debug, Clone)]
pub struct NetnsUnavailable(pub String);

impl fmt::Display for NetnsUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "network namespaces unavailable: {}", self.0)
    }
}

impl std::error::Error for NetnsUnavailable {}

/// One run's namespaces, bridge and veth pairs. Removed by `cleanup` or on drop.
#[derive(Debug)]
pub struct Network {
    prefix: String,
    /// The third octet: the run's subnet is `10.213.<subnet>.0/24`.
    subnet: u8,
    /// Nodes whose namespace exists (or may partly exist), in creation order.
    nodes: Vec<u64>,
    /// Set once everything was removed, so `Drop` after `cleanup` does nothing.
    cleaned: bool,
}

impl Network {
    /// Makes the bridge namespace, the root link and one namespace per node. On any failure
    /// everything made so far is removed. Fails with [`NetnsUnavailable`] when namespaces cannot
    /// be made at all.
    pub fn create(node_ids: &[u64]) -> anyhow::Result<Network> {
        for &id in node_ids {
            anyhow::ensure!(
                (1..=NODE_ID_MAX).contains(&id),
                "node id {id} out of range 1..={NODE_ID_MAX} (it is the host part of its address)"
            );
        }
        // Parallel runs in one process (tests) and in other processes must not pick the same
        // subnet between "is it free?" and "claim it".
        static IN_PROCESS: Mutex<()> = Mutex::new(());
        let _guard = IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
        let lock_dir = std::path::Path::new("/run/lock");
        let lock_dir = match lock_dir.is_dir() {
            true => lock_dir.to_path_buf(),
            false => std::env::temp_dir(),
        };
        let _flock = FileLock::acquire(&lock_dir.join(LOCK_FILE))?;

        let prefix = new_prefix();
        let mut net = Network {
            subnet: free_subnet(&prefix)?,
            prefix,
            nodes: Vec::new(),
            cleaned: false,
        };
        // `net` removes whatever was made if a step fails (Drop).
        net.create_bridge()?;
        for &id in node_ids {
            net.add_node(id)?;
        }
        Ok(net)
    }

    fn create_bridge(&mut self) -> anyhow::Result<()> {
        let br = self.bridge_ns();
        let host = self.root_ifname();
        // The first command tells "cannot make namespaces here" apart from other failures.
        run_ip(&["netns", "add", &br]).map_err(|e| match permission_problem(&e) {
            true => anyhow::Error::new(NetnsUnavailable(format!("{e:#}"))),
            false => e,
        })?;
        ip_in(&br, &["link", "set", "lo", "up"])?;
        ip_in(&br, &["link", "add", "br0", "type", "bridge"])?;
        ip_in(&br, &["link", "set", "br0", "up"])?;
        run_ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", "root", "netns", &br,
        ])?;
        let cidr = format!("{}/24", self.root_ip());
        run_ip(&["addr", "add", &cidr, "dev", &host])?;
        run_ip(&["link", "set", &host, "up"])?;
        ip_in(&br, &["link", "set", "root", "master", "br0"])?;
        ip_in(&br, &["link", "set", "root", "up"])?;
        Ok(())
    }

    /// Makes node `id`'s namespace and links it to the bridge (also usable for a node added
    /// later, e.g. by a membership nemesis).
    pub fn add_node(&mut self, id: u64) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=NODE_ID_MAX).contains(&id) && !self.nodes.contains(&id),
            "node id {id} is out of range or already has a namespace"
        );
        let ns = self.node_ns(id);
        let br = self.bridge_ns();
        let br_end = format!("n{id}");
        run_ip(&["netns", "add", &ns])?;
        self.nodes.push(id);
        ip_in(&ns, &["link", "set", "lo", "up"])?;
        ip_in(
            &br,
            &[
                "link", "add", &br_end, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )?;
        ip_in(&br, &["link", "set", &br_end, "master", "br0"])?;
        ip_in(&br, &["link", "set", &br_end, "up"])?;
        let cidr = format!("{}/24", self.ip(id));
        ip_in(&ns, &["addr", "add", &cidr, "dev", "eth0"])?;
        ip_in(&ns, &["link", "set", "eth0", "up"])?;
        Ok(())
    }

    /// The run's prefix, e.g. `stw41827a`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Node `id`'s namespace name.
    pub fn node_ns(&self, id: u64) -> String {
        format!("{}-n{id}", self.prefix)
    }

    /// The bridge namespace's name.
    pub fn bridge_ns(&self) -> String {
        format!("{}-br", self.prefix)
    }

    /// The root namespace's end of the link to the bridge.
    fn root_ifname(&self) -> String {
        format!("{}-h", self.prefix)
    }

    /// Node `id`'s address, e.g. `10.213.7.2`.
    pub fn ip(&self, id: u64) -> String {
        format!("{}.{}.{}.{id}", SUBNET_BASE[0], SUBNET_BASE[1], self.subnet)
    }

    /// The root namespace's address on the run's subnet (where clients' packets come from).
    pub fn root_ip(&self) -> String {
        format!(
            "{}.{}.{}.{ROOT_HOST}",
            SUBNET_BASE[0], SUBNET_BASE[1], self.subnet
        )
    }

    /// Every namespace of the run (nodes, then the bridge).
    pub fn namespaces(&self) -> Vec<String> {
        let mut all: Vec<String> = self.nodes.iter().map(|&id| self.node_ns(id)).collect();
        all.push(self.bridge_ns());
        all
    }

    /// Removes every namespace and the root-side veth. Idempotent; tries every step and
    /// reports the first failure. Processes still inside a namespace keep it alive (the kernel
    /// frees it when they exit), so callers stop their processes first.
    pub fn cleanup(&mut self) -> anyhow::Result<()> {
        if self.cleaned {
            return Ok(());
        }
        let mut first_err = None;
        // The root link first: deleting one end of a veth pair removes both at once, whereas
        // the kernel tears down a deleted namespace's links asynchronously.
        if let Err(e) = delete_link_if_present(&self.root_ifname()) {
            first_err.get_or_insert(e);
        }
        for ns in self.namespaces() {
            if let Err(e) = delete_ns_if_present(&ns) {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            None => {
                self.cleaned = true;
                Ok(())
            }
            Some(e) => Err(e),
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Err(e) = self.cleanup() {
            tracing::error!(prefix = %self.prefix, error = %format!("{e:#}"), "namespace cleanup failed");
            eprintln!("jepsen: namespace cleanup of {} failed: {e:#}", self.prefix);
        }
    }
}

/// Resolves on SIGINT or SIGTERM, naming the signal. The runner selects on it next to the run:
///
/// ```ignore
/// let result = tokio::select! {
///     r = run_workload(&mut cluster) => r,
///     sig = jepsen::netns::interrupted() => Err(anyhow::anyhow!("interrupted by {sig}")),
/// };
/// cluster.stop().await; // or just drop it: NetCluster's Drop kills nodes and removes namespaces
/// ```
///
/// Once installed, the handlers stay for the life of the process, so a second Ctrl-C during
/// cleanup does not cut the cleanup short.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut int, mut term) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        _ => {
            // Cannot watch signals: never resolve rather than report a signal that did not come.
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// Removes what earlier runs left behind (namespaces and root veths named `stw...` whose owner
/// process is gone); see [`cleanup_stale_matching`]. Returns what it removed.
pub fn cleanup_stale() -> Vec<String> {
    match cleanup_stale_matching(PREFIX_ROOT) {
        Ok(removed) => removed,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "stale namespace cleanup failed");
            Vec::new()
        }
    }
}

/// Removes namespaces and root-side interfaces whose name starts with `pattern` and whose owner
/// (the PID in the prefix) is no longer running; processes still inside such a namespace are
/// killed first. Runs of live processes (parallel tests, another runner) are left alone.
pub fn cleanup_stale_matching(pattern: &str) -> anyhow::Result<Vec<String>> {
    let mut removed = Vec::new();
    let listing = match run_ip(&["netns", "list"]) {
        Ok(out) => out,
        Err(e) if permission_problem(&e) => return Ok(removed),
        Err(e) => return Err(e),
    };
    // Root links first (see `Network::cleanup`).
    for link in run_ip(&["-o", "link", "show"])?.lines() {
        // "12: stw41827a-h@if11: <...>"
        let Some(name) = link.split(':').nth(1).map(str::trim) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        if name.starts_with(pattern) && !owner_alive(name) {
            delete_link_if_present(name)?;
            removed.push(name.to_string());
        }
    }
    // `ip netns list` prints "name" or "name (id: N)".
    for ns in listing.lines().filter_map(|l| l.split_whitespace().next()) {
        if !ns.starts_with(pattern) || owner_alive(ns) {
            continue;
        }
        if let Ok(pids) = run_ip(&["netns", "pids", ns]) {
            for pid in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                // SAFETY: kill(2) with a PID read from the kernel; no memory is involved.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        delete_ns_if_present(ns)?;
        removed.push(ns.to_string());
    }
    Ok(removed)
}

/// `stw<pid><letter>`: the owner's PID (to tell stale leftovers from live runs) and a letter
/// per `Network` made by this process. At most 3 + 7 + 1 bytes, so `<prefix>-h` fits IFNAMSIZ.
fn new_prefix() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed) % 26;
    let letter = char::from(b'a' + seq as u8);
    let prefix = format!("{PREFIX_ROOT}{}{letter}", std::process::id());
    debug_assert!(prefix.len() + 2 <= IFNAME_BYTES_MAX);
    prefix
}

/// Whether the process that made a `stw<pid><letter>...` name still runs (unparsable: assume
/// it does, and leave the name alone).
fn owner_alive(name: &str) -> bool {
    let digits: String = name[PREFIX_ROOT.len().min(name.len())..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    match digits.parse::<u32>() {
        Ok(pid) => std::path::Path::new(&format!("/proc/{pid}")).exists(),
        Err(_) => true,
    }
}

/// The first `10.213.K.0/24` that no route or address in the root namespace overlaps.
fn free_subnet(prefix: &str) -> anyhow::Result<u8> {
    let routes = run_ip(&["-4", "route", "show", "table", "all"]).map_err(|e| {
        match permission_problem(&e) {
            true => anyhow::Error::new(NetnsUnavailable(format!("{e:#}"))),
            false => e,
        }
    })?;
    let addrs = run_ip(&["-4", "-o", "addr", "show"])?;
    let taken = taken_subnets(&routes, &addrs);
    // Start from a PID-derived point so concurrent processes rarely even contend.
    let start = std::process::id() as usize + usize::from(prefix.as_bytes()[prefix.len() - 1]);
    (0..254usize)
        .map(|i| ((start + i) % 254 + 1) as u8)
        .find(|k| !taken.contains(k))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no free 10.213.K.0/24 for the test network: routes or addresses in the root \
                 namespace cover all of 10.213.0.0/16; see `ip -4 route show table all`"
            )
        })
}

/// Third octets K of `10.213.K.0/24` overlapped by any route destination or address prefix in
/// the given `ip -4 route show table all` and `ip -4 -o addr show` output.
fn taken_subnets(routes: &str, addrs: &str) -> BTreeSet<u8> {
    let mut nets: Vec<(u32, u8)> = Vec::new();
    for line in routes.lines() {
        // "[type] DEST[/LEN] ...": the first token that parses as an IPv4 prefix; "default" and
        // 0.0.0.0/0 are the way out, not a use of the range.
        if let Some(net) = line.split_whitespace().take(2).find_map(parse_prefix) {
            nets.push(net);
        }
    }
    for line in addrs.lines() {
        // "2: eth0    inet 192.0.2.2/24 brd ..."
        let mut words = line.split_whitespace();
        if words.any(|w| w == "inet") {
            if let Some(net) = words.next().and_then(parse_prefix) {
                nets.push(net);
            }
        }
    }
    let mut taken = BTreeSet::new();
    for (net, len) in nets.into_iter().filter(|&(_, len)| len > 0) {
        for k in 0..=255u8 {
            let ours = u32::from_be_bytes([SUBNET_BASE[0], SUBNET_BASE[1], k, 0]);
            let common = len.min(24);
            let mask = u32::MAX << (32 - u32::from(common));
            if net & mask == ours & mask {
                taken.insert(k);
            }
        }
    }
    taken
}

/// "a.b.c.d" (a /32) or "a.b.c.d/len" as (address, len).
fn parse_prefix(text: &str) -> Option<(u32, u8)> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, l.parse::<u8>().ok().filter(|l| *l <= 32)?),
        None => (text, 32),
    };
    let addr: std::net::Ipv4Addr = addr.parse().ok()?;
    Some((u32::from(addr), len))
}

/// Runs `ip <args>`; the error names the command and its stderr.
fn run_ip(args: &[&str]) -> anyhow::Result<String> {
    run("ip", args)
}

/// Runs `ip -n <ns> <args>` (the command inside namespace `ns`).
fn ip_in(ns: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// Runs `program args`, returning stdout; the error names the command and its stderr.
pub(crate) fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let line = format!("{program} {}", args.join(" "));
    let out = Command::new(program).args(args).output().map_err(|e| {
        let err = anyhow::anyhow!("`{line}` could not start: {e}");
        match e.kind() {
            std::io::ErrorKind::NotFound => anyhow::Error::new(NetnsUnavailable(format!(
                "`{program}` not found (install iproute2 / nftables)"
            ))),
            _ => err,
        }
    })?;
    if !out.status.success() {
        anyhow::bail!(
            "`{line}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs an nftables script inside namespace `ns` (`ip netns exec <ns> nft -f -`); the error
/// names the namespace, the script and nft's stderr. Used by the nemesis.
pub fn nft(ns: &str, script: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("`ip netns exec {ns} nft -f -` could not start"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "`ip netns exec {ns} nft -f -` failed ({}): {}\nscript:\n{script}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Whether a failed command failed for lack of privilege.
fn permission_problem(err: &anyhow::Error) -> bool {
    if err.downcast_ref::<NetnsUnavailable>().is_some() {
        return true;
    }
    let text = format!("{err:#}");
    text.contains("Operation not permitted") || text.contains("Permission denied")
}

fn delete_ns_if_present(ns: &str) -> anyhow::Result<()> {
    let listing = run_ip(&["netns", "list"])?;
    if listing
        .lines()
        .any(|l| l.split_whitespace().next() == Some(ns))
    {
        run_ip(&["netns", "delete", ns])?;
    }
    Ok(())
}

fn delete_link_if_present(name: &str) -> anyhow::Result<()> {
    let present = Command::new("ip")
        .args(["link", "show", "dev", name])
        .output()
        .map(|o| o.status.success())
        .with_context(|| format!("`ip link show dev {name}` could not start"))?;
    match present.then(|| run_ip(&["link", "delete", name])) {
        // Gone between the look and the delete (its namespace was being torn down): done.
        Some(Err(e)) if !format!("{e:#}").contains("Cannot find device") => Err(e),
        _ => Ok(()),
    }
}

/// An exclusive `flock` on a file, released on drop.
struct FileLock(File);

impl FileLock {
    fn acquire(path: &std::path::Path) -> anyhow::Result<FileLock> {
        let shown = path.display();
        // flock needs no write access: an unprivileged caller gets as far as `ip netns add`,
        // which then says what is missing.
        let file = File::open(path)
            .or_else(|_| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(path)
            })
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::PermissionDenied => anyhow::Error::new(NetnsUnavailable(
                    format!("cannot open lock file {shown}: {e}"),
                )),
                _ => anyhow::anyhow!("cannot open lock file {shown}: {e}"),
            })?;
        // SAFETY: flock(2) on a descriptor this struct owns for as long as the lock is held.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        anyhow::ensure!(
            rc == 0,
            "flock {shown}: {}",
            std::io::Error::last_os_error()
        );
        Ok(FileLock(file))
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // SAFETY: as in `acquire`; closing the file would release it too.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_addresses_take_the_subnets_they_overlap() {
        let routes = "default via 192.0.2.1 dev eth0\n\
                      10.213.7.0/24 dev x proto kernel scope link src 10.213.7.254\n\
                      local 10.213.9.1 dev y table local proto kernel scope host src 10.213.9.1\n\
                      broadcast 172.17.255.255 dev docker0 table local\n";
        let addrs = "5: z    inet 10.213.40.3/22 brd 10.213.43.255 scope global z\n";
        let taken = taken_subnets(routes, addrs);
        assert_eq!(taken, BTreeSet::from([7, 9, 40, 41, 42, 43]));
    }

    #[test]
    fn a_covering_route_takes_everything() {
        let taken = taken_subnets("10.0.0.0/8 dev vpn0 scope link\n", "");
        assert_eq!(taken.len(), 256);
    }

    #[test]
    fn prefixes_fit_interface_names_and_carry_the_owner() {
        let p = new_prefix();
        assert!(p.len() + 2 <= IFNAME_BYTES_MAX, "{p}");
        assert!(owner_alive(&format!("{p}-n1")));
        assert!(
            !owner_alive("stw4194999a-n1"),
            "PIDs above pid_max never run"
        );
        assert!(owner_alive("stwx-n1"), "unparsable names are left alone");
    }
}
