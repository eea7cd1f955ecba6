//! TLS for the client API and the peer port (rustls, through tonic).
//!
//! - `NodeTls::load`: what a node serves and dials with, from the PEM files its `[tls]` section
//!   names. The peer port always asks for a client certificate signed by the CA (mutual TLS);
//!   the client API asks for one and requires it when `tls.client_cert_required` is set.
//! - `ClientTls`: what a client dials with (`--cacert`, `--cert`, `--key`).
//! - `generate`: a throw-away CA with certificates for nodes and a client, for `steward dev --tls`
//!   and tests. Real deployments bring certificates from their own CA.

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

/// Where `generate` wrote a certificate and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files `generate` wrote.
#[derive(Clone, Debug)]
pub struct GeneratedPki {
    /// The CA certificate (its key is not kept: nothing more can be signed).
    pub ca: PathBuf,
    /// One per node id, in the order given.
    pub nodes: Vec<(u64, CertFiles)>,
    /// Client certificates, in the order given, by common name.
    pub clients: Vec<(String, CertFiles)>,
}

/// Makes a throw-away CA in `dir`, signs a certificate for each node (valid for every name in
/// `hosts`, for both its ports) and one client certificate per common name, and forgets the CA's
/// key. Keys are written readable by their owner only. Overwrites what is there.
pub fn generate(
    dir: &Path,
    node_ids: &[u64],
    hosts: &[String],
    client_names: &[String],
) -> anyhow::Result<GeneratedPki> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "steward throw-away CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let ca_path = dir.join("ca.pem");
    write_file(&ca_path, ca.pem().as_bytes(), false)?;

    let leaf = |name: &str, sans: &[String], server: bool| -> anyhow::Result<CertFiles> {
        let mut params = CertificateParams::new(sans.to_vec())?;
        params.distinguished_name.push(DnType::CommonName, name);
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
        let cert = params.signed_by(&key, &ca)?;
        let files = CertFiles {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}-key.pem")),
        };
        write_file(&files.cert, cert.pem().as_bytes(), false)?;
        write_file(&files.key, key.serialize_pem().as_bytes(), true)?;
        Ok(files)
    };
    let mut nodes = Vec::with_capacity(node_ids.len());
    for &id in node_ids {
        nodes.push((id, leaf(&node_common_name(id), hosts, true)?));
    }
    let mut clients = Vec::with_capacity(client_names.len());
    for name in client_names {
        clients.push((name.clone(), leaf(name, &[], false)?));
    }
    Ok(GeneratedPki {
        ca: ca_path,
        nodes,
        clients,
    })
}

fn write_file(path: &Path, bytes: &[u8], private: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
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
mod tests {
    use super::*;

    #[test]
    fn generated_files_load_as_node_and_client_tls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = generate(
            dir.path(),
            &[1, 2],
            &["localhost".to_string(), "127.0.0.1".to_string()],
            &["admin".to_string()],
        )
        .expect("generate");
        assert_eq!(pki.nodes.len(), 2);
        assert_eq!(pki.nodes[1].1.cert, dir.path().join("steward-node-2.pem"));
        let config = TlsConfig {
            ca_file: Some(pki.ca.clone()),
            cert_file: Some(pki.nodes[0].1.cert.clone()),
            key_file: Some(pki.nodes[0].1.key.clone()),
            ..TlsConfig::default()
        };
        assert!(NodeTls::load(&config).expect("load").is_some());
        let admin = &pki.clients[0].1;
        ClientTls::from_files(&pki.ca, Some(&admin.cert), Some(&admin.key)).expect("client");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&admin.key)
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn node_ids_come_from_common_names() {
        assert_eq!(node_id_of(&node_common_name(7)), Some(7));
        for cn in [
            "steward-node-0",
            "steward-node-",
            "steward-node-x",
            "admin",
            "node-1",
        ] {
            assert_eq!(node_id_of(cn), None, "{cn}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = generate(dir.path(), &[3], &["localhost".into()], &["ci-bot".into()])
            .expect("generate");
        let der = |path: &Path| {
            let pem = std::fs::read_to_string(path).expect("read");
            let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64).expect("b64")
        };
        assert_eq!(
            common_name(&der(&pki.nodes[0].1.cert)).as_deref(),
            Some("steward-node-3")
        );
        assert_eq!(
            common_name(&der(&pki.clients[0].1.cert)).as_deref(),
            Some("ci-bot")
        );
        assert_eq!(common_name(b"junk"), None);
    }

    #[test]
    fn unreadable_or_non_pem_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").expect("write");
        let err = ClientTls::from_files(&junk, None, None)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            err.contains("--cacert") && err.contains("no PEM block"),
            "{err}"
        );
        let missing = dir.path().join("missing.pem");
        let config = TlsConfig {
            ca_file: Some(missing.clone()),
            cert_file: Some(missing.clone()),
            key_file: Some(missing),
            ..TlsConfig::default()
        };
        let err = NodeTls::load(&config).err().expect("refused").to_string();
        assert!(err.contains("tls.ca_file: cannot read"), "{err}");
        let err = ClientTls::from_files(&junk, Some(&junk), None)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("--cert needs --key"), "{err}");
    }
}
