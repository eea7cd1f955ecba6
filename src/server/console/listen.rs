//! The console's listener: plain TCP, or TLS with the node's own certificate (the client API's
//! `tls` section), where a browser may present a client certificate signed by the CA (required
//! when `tls.client_cert_required`). Handshakes run in their own tasks with a deadline, so a
//! client that connects and says nothing never holds up the others.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::either::Either;

use crate::config::TlsConfig;

/// Longest a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepted connections waiting for the HTTP server to take them.
const ACCEPTED_QUEUE: usize = 64;

/// Who is on the other end of a console connection.
#[derive(Clone, Debug)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The common name of the client certificate it presented over TLS.
    pub common_name: Option<String>,
}

/// A connection: plain or TLS.
pub type Io = Either<TcpStream, tokio_rustls::server::TlsStream<TcpStream>>;

/// The server side of the console's TLS, from the node's `tls` section (`None` on plaintext).
pub fn server_config(tls: &TlsConfig) -> anyhow::Result<Option<Arc<rustls::ServerConfig>>> {
    let (Some(ca_file), Some(cert_file), Some(key_file)) =
        (&tls.ca_file, &tls.cert_file, &tls.key_file)
    else {
        return Ok(None);
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file)
        .with_context(|| format!("tls.ca_file: cannot read {}", ca_file.display()))?
    {
        roots
            .add(cert.with_context(|| format!("tls.ca_file: {}", ca_file.display()))?)
            .with_context(|| format!("tls.ca_file: {}", ca_file.display()))?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    );
    let verifier = match tls.client_cert_required {
        true => verifier.build(),
        false => verifier.allow_unauthenticated().build(),
    }
    .context("tls.ca_file: no usable CA certificate")?;
    let certs = CertificateDer::pem_file_iter(cert_file)
        .with_context(|| format!("tls.cert_file: cannot read {}", cert_file.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("tls.cert_file: {}", cert_file.display()))?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .with_context(|| format!("tls.key_file: cannot read {}", key_file.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("console TLS: protocol versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("console TLS: the node's certificate and key")?;
    // HTTP/2 over TLS: a browser's streams of many open pages share one connection (over
    // HTTP/1.1 it opens at most six to one host).
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

/// The console's listener, as axum serves from it.
pub struct ConsoleListener {
    accepted: mpsc::Receiver<(Io, Peer)>,
    local: SocketAddr,
}

impl ConsoleListener {
    /// Accepts on `listener` in a task of its own (ended by `stop`), handshaking TLS when
    /// `tls` is set.
    pub fn start(
        listener: TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> io::Result<ConsoleListener> {
        let local = listener.local_addr()?;
        let (tx, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        tokio::spawn(async move {
            loop {
                let (stream, addr) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            // Out of file descriptors and the like: wait, as axum's own
                            // listener does, rather than spin.
                            tracing::warn!(error = %e, "console: accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                    _ = stopped(&mut stop) => return,
                };
                let _ = stream.set_nodelay(true);
                let Some(acceptor) = acceptor.clone() else {
                    let peer = Peer {
                        addr,
                        common_name: None,
                    };
                    if tx.send((Either::Left(stream), peer)).await.is_err() {
                        return;
                    }
                    continue;
                };
                let tx = tx.clone();
                tokio::spawn(async move {
                    let stream = match tokio::time::timeout(
                        HANDSHAKE_TIMEOUT,
                        acceptor.accept(stream),
                    )
                    .await
                    {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(%addr, error = %e, "console: TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%addr, "console: TLS handshake timed out");
                            return;
                        }
                    };
                    let common_name = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|certs| certs.first())
                        .and_then(|c| crate::tls::common_name(c.as_ref()));
                    let _ = tx
                        .send((Either::Right(stream), Peer { addr, common_name }))
                        .await;
                });
            }
        });
        Ok(ConsoleListener { accepted, local })
    }
}

/// Resolves once `stop` is set (the guard `wait_for` returns is not held across an await).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl axum::serve::Listener for ConsoleListener {
    type Io = Io;
    type Addr = Peer;

    async fn accept(&mut self) -> (Io, Peer) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accept task ended (stop): nothing more comes; the server's graceful shutdown
            // ends it meanwhile.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Peer> {
        Ok(Peer {
            addr: self.local,
            common_name: None,
        })
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, ConsoleListener>>
    for Peer
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, ConsoleListener>) -> Peer {
        stream.remote_addr().clone()
    }
}
