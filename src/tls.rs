//! TLS for the client API and the peer port (rustls, through tonic).
//!
//! - `NodeTls::load`: what a node serves and dials with, from the PEM files its `[tls]` section
//!   names. The peer port always asks for a client certificate signed by the CA (mutual TLS);
//!   the client API asks for one and requires it when `tls.client_cert_required` is set.
//! - `ClientTls`: what a client dials with (`--cacert`, `--cert`, `--key`).
//! - `issue`: a new CA with certificates for nodes and clients, for `steward certs create`
//!   (the CA's key kept, to sign more later) and, through `generate`, a throw-away set for
//!   `steward dev --tls` and tests (the CA's key forgotten). Deployments may instead bring
//!   certificates from their own CA.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::config::TlsConfig;

/// The subject common name of node `id`'s certificate.
pub fn node_common_name(id: u64) -> String {
    format!("steward-node-{id}")
}

/// The node id a certificate subject common name names (`steward-node-<id>`), if any.
pub fn node_id_of(common_name: &str) -> Option<u64> {
    common_name
        .strip_prefix("steward-node-")
        .and_then(|id| id.parse().ok())
        .filter(|id| *id >= 1)
}

/// The subject common name of a DER certificate (the first one, when there are several).
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// The common name of the certificate the other end of `request`'s connection presented;
/// None on plaintext or when it presented none.
pub fn peer_common_name<T>(request: &tonic::Request<T>) -> Option<String> {
    let certs = request.peer_certs()?;
    certs.first().and_then(|c| common_name(c.as_ref()))
}

/// What a node with TLS serves and dials with.
pub struct NodeTls {
    /// The client API's server side.
    pub client_api: ServerTlsConfig,
    /// The peer port's server side: a client certificate signed by the CA is required.
    pub peer_server: ServerTlsConfig,
    /// How this node dials other nodes (their peer port and their client API): it checks their
    /// certificate against the CA and presents its own.
    pub peer_client: ClientTlsConfig,
}

impl NodeTls {
    /// None when the config asks for plaintext. The error names the file that could not be read.
    pub fn load(config: &TlsConfig) -> anyhow::Result<Option<NodeTls>> {
        if config.plaintext {
            return Ok(None);
        }
        let (Some(ca_file), Some(cert_file), Some(key_file)) =
            (&config.ca_file, &config.cert_file, &config.key_file)
        else {
            anyhow::bail!(
                "tls: ca_file, cert_file and key_file are required unless tls.plaintext = true"
            );
        };
        let ca = Certificate::from_pem(read_pem(ca_file, "tls.ca_file")?);
        let identity = Identity::from_pem(
            read_pem(cert_file, "tls.cert_file")?,
            read_pem(key_file, "tls.key_file")?,
        );
        Ok(Some(NodeTls {
            client_api: ServerTlsConfig::new()
                .identity(identity.clone())
                .client_ca_root(ca.clone())
                .client_auth_optional(!config.client_cert_required),
            peer_server: ServerTlsConfig::new()
                .identity(identity.clone())
                .client_ca_root(ca.clone()),
            peer_client: ClientTlsConfig::new().ca_certificate(ca).identity(identity),
        }))
    }
}

/// What a client dials with: the CA its servers' certificates are checked against, and its own
/// certificate for mutual TLS.
#[derive(Clone)]
pub struct ClientTls {
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientTls {
    /// From PEM files; `cert` and `key` come together or not at all.
    pub fn from_files(
        ca: &Path,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> anyhow::Result<ClientTls> {
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((read_pem(cert, "--cert")?, read_pem(key, "--key")?)),
            (None, None) => None,
            (Some(_), None) => anyhow::bail!("--cert needs --key (the certificate's private key)"),
            (None, Some(_)) => anyhow::bail!("--key needs --cert"),
        };
        Ok(ClientTls {
            ca_pem: read_pem(ca, "--cacert")?,
            identity,
        })
    }

    /// tonic's form of it.
    pub fn config(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        match &self.identity {
            Some((cert, key)) => config.identity(Identity::from_pem(cert, key)),
            None => config,
        }
    }
}

/// Reads a PEM file, refusing one that holds no PEM block; `what` names the flag or field.
fn read_pem(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("{what}: cannot read {}", path.display()))?;
    if !bytes
        .windows(b"-----BEGIN ".len())
        .any(|w| w == b"-----BEGIN ")
    {
        anyhow::bail!("{what}: {} holds no PEM block", path.display());
    }
    Ok(bytes)
}

/// Where a certificate and its key were written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files `issue` (or `generate`) wrote.
#[derive(Clone, Debug)]
pub struct GeneratedPki {
    /// The CA certificate.
    pub ca: PathBuf,
    /// The CA's key, when it was kept (`PkiPlan::keep_ca_key`); whoever holds it can sign
    /// certificates every node trusts.
    pub ca_key: Option<PathBuf>,
    /// One per node id, in the order given.
    pub nodes: Vec<(u64, CertFiles)>,
    /// Client certificates, in the order given, by common name.
    pub clients: Vec<(String, CertFiles)>,
}

/// How long a CA that `issue` makes is valid: long enough to outlive many rounds of node and
/// client certificates, which `steward certs sign` renews with it.
pub const CA_VALIDITY: std::time::Duration = std::time::Duration::from_secs(10 * 365 * 86_400);

/// How far back certificates' validity starts, so a node whose clock is a little behind still
/// accepts them.
pub const CLOCK_SKEW_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(300);

/// The CA that signs what `issue` makes.
#[derive(Clone, Debug)]
pub enum CaSource {
    /// A new CA with this subject common name, valid for `CA_VALIDITY`; with `keep_key` its key
    /// is written as `ca-key.pem` (to sign more later), else forgotten.
    New { name: String, keep_key: bool },
    /// An existing CA (its certificate and key as PEM), already in the directory as `ca.pem`
    /// and `ca-key.pem`: more certificates for a cluster that trusts it.
    Existing { cert_pem: String, key_pem: String },
}

/// What `issue` makes: certificates for nodes and clients, signed by a new or an existing CA.
#[derive(Clone, Debug)]
pub struct PkiPlan {
    pub ca: CaSource,
    /// Each node's id and the names its certificate is valid for (DNS names or IP addresses,
    /// for both its ports); at least one each.
    pub nodes: Vec<(u64, Vec<String>)>,
    /// Common names of client certificates (user names, when authentication is on).
    pub clients: Vec<String>,
    /// How long each node and client certificate is valid, from now.
    pub valid_for: std::time::Duration,
    /// Replace files already there; otherwise `issue` refuses to write over any of them.
    pub overwrite: bool,
}

impl PkiPlan {
    /// Every file `issue` writes in `dir`, in the order it writes them: `ca.pem`, `ca-key.pem`
    /// (when kept), then `<name>.pem` and `<name>-key.pem` per node (`steward-node-<id>`) and
    /// per client. Errors on names that cannot be file names, on a client named like a node,
    /// and on two certificates that would land in the same file.
    pub fn files(&self, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
        let mut names = Vec::with_capacity(self.nodes.len() + self.clients.len());
        let mut ids = std::collections::BTreeSet::new();
        for (id, hosts) in &self.nodes {
            if *id == 0 {
                anyhow::bail!("node ids start at 1");
            }
            if !ids.insert(*id) {
                anyhow::bail!("node {id} is given twice");
            }
            if hosts.is_empty() {
                anyhow::bail!(
                    "node {id}'s certificate names no host: clients and peers could not verify it"
                );
            }
            names.push(node_common_name(*id));
        }
        for name in &self.clients {
            check_file_name(name)?;
            if let Some(id) = node_id_of(name) {
                anyhow::bail!(
                    "client name {name:?} is node {id}'s common name: the peer port would admit it as that node"
                );
            }
            names.push(name.clone());
        }
        let mut files = Vec::new();
        if let CaSource::New { keep_key, .. } = &self.ca {
            files.push(dir.join("ca.pem"));
            if *keep_key {
                files.push(dir.join("ca-key.pem"));
            }
        }
        for name in names {
            files.push(dir.join(format!("{name}.pem")));
            files.push(dir.join(format!("{name}-key.pem")));
        }
        let mut seen = std::collections::BTreeSet::new();
        for file in &files {
            if !seen.insert(file) {
                anyhow::bail!(
                    "two certificates or keys would be written to {}: give each client its own name",
                    file.display()
                );
            }
        }
        Ok(files)
    }
}

/// A common name that becomes `<name>.pem`: letters, digits, `.`, `_`, `@`, `-`, not starting
/// with `.` or `-`.
fn check_file_name(name: &str) -> anyhow::Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-');
    if name.is_empty() || name.starts_with(['.', '-']) || !name.chars().all(allowed) {
        anyhow::bail!(
            "client name {name:?}: use letters, digits, '.', '_', '@' and '-' (it names the files {name}.pem and {name}-key.pem)"
        );
    }
    Ok(())
}

/// Makes a new CA in `dir` (created if missing), signs a certificate for each node (common name
/// `steward-node-<id>`, server and client usages, valid for its names) and one client
/// certificate per client name, and writes them as PEM, keys readable by their owner only.
/// Without `plan.overwrite`, refuses before writing anything if one of the files exists.
pub fn issue(dir: &Path, plan: &PkiPlan) -> anyhow::Result<GeneratedPki> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let files = plan.files(dir)?;
    if !plan.overwrite {
        if let Some(existing) = files.iter().find(|f| f.exists()) {
            anyhow::bail!("{} already exists; not overwriting it", existing.display());
        }
    }
    if plan.valid_for.is_zero() {
        anyhow::bail!("a certificate must be valid for some time (got 0)");
    }
    let now = time::OffsetDateTime::now_utc();
    let not_before = now - CLOCK_SKEW_ALLOWANCE;
    let until = |valid_for: std::time::Duration| -> anyhow::Result<time::OffsetDateTime> {
        now.checked_add(time::Duration::try_from(valid_for)?)
            .ok_or_else(|| anyhow::anyhow!("a validity of {valid_for:?} ends past year 9999"))
    };
    let leaf_not_after = until(plan.valid_for)?;
    create_private_dir(dir)?;
    let ca_path = dir.join("ca.pem");
    let (new_ca, existing_ca);
    let (ca, ca_key): (&rcgen::Issuer<'_, KeyPair>, Option<PathBuf>) = match &plan.ca {
        CaSource::New { name, keep_key } => {
            let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
            ca_params
                .distinguished_name
                .push(DnType::CommonName, name.as_str());
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            ca_params.not_before = not_before;
            ca_params.not_after = until(CA_VALIDITY.max(plan.valid_for))?;
            new_ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
            write_file(&ca_path, new_ca.pem().as_bytes(), false, plan.overwrite)?;
            let ca_key = if *keep_key {
                let path = dir.join("ca-key.pem");
                let pem = new_ca.key().serialize_pem();
                write_file(&path, pem.as_bytes(), true, plan.overwrite)?;
                Some(path)
            } else {
                None
            };
            (&new_ca, ca_key)
        }
        CaSource::Existing { cert_pem, key_pem } => {
            let key = KeyPair::from_pem(key_pem).context("the CA's key (ca-key.pem)")?;
            existing_ca = rcgen::Issuer::from_ca_cert_pem(cert_pem, key)
                .context("the CA's certificate (ca.pem)")?;
            (&existing_ca, Some(dir.join("ca-key.pem")))
        }
    };

    let leaf = |name: &str, sans: &[String], server: bool| -> anyhow::Result<CertFiles> {
        let mut params = CertificateParams::new(sans.to_vec())
            .with_context(|| format!("the certificate of {name}: names {sans:?}"))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.not_before = not_before;
        params.not_after = leaf_not_after;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = if server {
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ]
        } else {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        };
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, ca)?;
        let files = CertFiles {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}-key.pem")),
        };
        write_file(&files.cert, cert.pem().as_bytes(), false, plan.overwrite)?;
        write_file(
            &files.key,
            key.serialize_pem().as_bytes(),
            true,
            plan.overwrite,
        )?;
        Ok(files)
    };
    let mut nodes = Vec::with_capacity(plan.nodes.len());
    for (id, hosts) in &plan.nodes {
        nodes.push((*id, leaf(&node_common_name(*id), hosts, true)?));
    }
    let mut clients = Vec::with_capacity(plan.clients.len());
    for name in &plan.clients {
        clients.push((name.clone(), leaf(name, &[], false)?));
    }
    Ok(GeneratedPki {
        ca: ca_path,
        ca_key,
        nodes,
        clients,
    })
}

/// A throw-away CA in `dir` for `steward dev --tls` and tests: `issue` with every node valid
/// for the same `hosts`, the CA's key forgotten (nothing more can be signed), files overwritten.
pub fn generate(
    dir: &Path,
    node_ids: &[u64],
    hosts: &[String],
    client_names: &[String],
) -> anyhow::Result<GeneratedPki> {
    issue(
        dir,
        &PkiPlan {
            ca: CaSource::New {
                name: "steward throw-away CA".to_string(),
                keep_key: false,
            },
            nodes: node_ids.iter().map(|&id| (id, hosts.to_vec())).collect(),
            clients: client_names.to_vec(),
            valid_for: CA_VALIDITY,
            overwrite: true,
        },
    )
}

/// Creates `dir` (readable by its owner only, as it holds keys) and its missing parents; one
/// already there is left as it is.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    match builder.create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(e).with_context(|| format!("cannot create {}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// Writes a new file (a key readable by its owner only). With `overwrite`, a file already there
/// is removed first, so a key never keeps the looser mode of what it replaces; without, one
/// already there is an error.
fn write_file(path: &Path, bytes: &[u8], private: bool, overwrite: bool) -> anyhow::Result<()> {
    use std::io::Write;
    if overwrite {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot replace {}", path.display()));
            }
            _ => {}
        }
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests;
