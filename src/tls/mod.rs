//! TLS for `tls-port`: the server's certificate and key and the
//! client-certificate policy, loaded once at start-up into one rustls
//! configuration that every TLS connection shares. And TLS for the
//! cluster's node bus (`tls-cluster`), from the same files.
//!
//! Every mistake is found before the server listens, and its message names
//! the directive and the file, so a server that starts has a TLS setup
//! that works.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};

pub use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::config::{Config, TlsAuthClients};

/// How long a client has to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS setup that cannot work. The messages name the directive and the
/// file, and say what to set.
#[derive(Debug)]
pub enum TlsError {
    /// `tls-port` without `tls-cert-file` or `tls-key-file` (named).
    MissingFile(&'static str),
    /// `tls-cluster yes` without `tls-cert-file`, `tls-key-file` or
    /// `tls-ca-cert-file` (named).
    ClusterMissingFile(&'static str),
    /// Client certificates are asked for but no CA is given to check them.
    MissingCa(TlsAuthClients),
    Read {
        directive: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    InvalidPem {
        directive: &'static str,
        path: PathBuf,
        error: pem::Error,
    },
    NoCertificate {
        directive: &'static str,
        path: PathBuf,
    },
    NoKey(PathBuf),
    /// rustls refused the setup itself, or the certificate and key.
    Setup(String),
    Unusable {
        cert: PathBuf,
        key: PathBuf,
        error: String,
    },
    BadCa {
        path: PathBuf,
        /// 1 for the file's first certificate; 0 for the set as a whole.
        index: usize,
        error: String,
    },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::MissingFile(missing) => write!(
                f,
                "tls-port is set but {missing} is not: set tls-cert-file and tls-key-file \
                 to the server's certificate chain and private key (PEM)"
            ),
            TlsError::ClusterMissingFile(missing) => write!(
                f,
                "tls-cluster is yes but {missing} is not set: set tls-cert-file and \
                 tls-key-file to this node's certificate chain and private key (PEM; the bus \
                 uses it as server and as client, with this node's IP address from \
                 cluster-nodes among its names), and tls-ca-cert-file to the CA certificate \
                 (PEM) that signs every node's certificate"
            ),
            TlsError::MissingCa(auth) => write!(
                f,
                "tls-auth-clients is {} but tls-ca-cert-file is not set: set tls-ca-cert-file \
                 to the CA certificates (PEM) that sign client certificates, or set \
                 'tls-auth-clients no'",
                auth.as_str()
            ),
            TlsError::Read {
                directive,
                path,
                error,
            } => write!(f, "cannot read {directive} '{}': {error}", path.display()),
            TlsError::InvalidPem {
                directive,
                path,
                error,
            } => write!(
                f,
                "{directive} '{}' is not valid PEM: {error}",
                path.display()
            ),
            TlsError::NoCertificate { directive, path } => write!(
                f,
                "{directive} '{}' holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            ),
            TlsError::NoKey(path) => write!(
                f,
                "tls-key-file '{}' holds no unencrypted PEM private key \
                 (PKCS#8, PKCS#1 or SEC1)",
                path.display()
            ),
            TlsError::Setup(error) => write!(f, "cannot set up TLS: {error}"),
            TlsError::Unusable { cert, key, error } => write!(
                f,
                "tls-cert-file '{}' and tls-key-file '{}' do not make a usable certificate: \
                 {error}",
                cert.display(),
                key.display()
            ),
            TlsError::BadCa {
                path,
                index: 0,
                error,
            } => write!(f, "tls-ca-cert-file '{}': {error}", path.display()),
            TlsError::BadCa { path, index, error } => write!(
                f,
                "tls-ca-cert-file '{}': certificate {index} is not a usable CA certificate: \
                 {error}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for TlsError {}

/// The acceptor for `tls-port`, or `None` when `tls-port` is 0 (the other
/// TLS directives are then not read).
pub fn acceptor(config: &Config) -> Result<Option<TlsAcceptor>, TlsError> {
    if config.tls_port == 0 {
        return Ok(None);
    }
    let server_config = server_config(config)?;
    Ok(Some(TlsAcceptor::from(Arc::new(server_config))))
}

fn server_config(config: &Config) -> Result<ServerConfig, TlsError> {
    let (Some(cert_file), Some(key_file)) = (&config.tls_cert_file, &config.tls_key_file) else {
        let missing = if config.tls_cert_file.is_none() {
            "tls-cert-file"
        } else {
            "tls-key-file"
        };
        return Err(TlsError::MissingFile(missing));
    };
    // Checked before any file is read, so the first error is the one that
    // needs fixing first.
    let ca_file = match (config.tls_auth_clients, &config.tls_ca_cert_file) {
        (TlsAuthClients::No, _) => None,
        (_, Some(ca_file)) => Some(ca_file),
        (auth, None) => return Err(TlsError::MissingCa(auth)),
    };

    let chain = certificates("tls-cert-file", cert_file)?;
    let key = private_key(key_file)?;
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?;
    let builder = match ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => builder.with_client_cert_verifier(client_verifier(
            ca_file,
            roots(ca_file)?,
            config.tls_auth_clients,
            provider,
        )?),
    };
    builder
        .with_single_cert(chain, key)
        .map_err(unusable(cert_file, key_file))
}

/// The node bus's TLS: the acceptor its server listens with and the
/// connector it dials its peers with.
#[derive(Clone)]
pub struct BusTls {
    pub acceptor: TlsAcceptor,
    pub connector: TlsConnector,
}

/// The node bus's TLS with `tls-cluster yes` and `cluster-enabled yes`,
/// else `None` (no file is then read). Every node uses its
/// `tls-cert-file`/`tls-key-file` both as the bus's server and as its
/// client, and `tls-ca-cert-file` is the CA that signs every node's
/// certificate: a node accepts a peer only with a client certificate from
/// it, whatever `tls-auth-clients` says for clients.
///
/// A node dialling a peer checks that the peer's certificate names, as an
/// IP address SAN, the address `cluster-nodes` gives the peer (`localhost`
/// stands for 127.0.0.1), as rustls's standard verification does. Chosen
/// over checking the CA alone, which would spare writing the address into
/// each certificate, because it needs no verifier of our own (whose
/// mistakes would pass silently), and because then any server certificate
/// the CA ever signed, for another machine or service, could answer for a
/// node's address. (The listening side cannot tell a node's client
/// certificate from a client's when the CA signs both: `cluster-secret`
/// does that.)
pub fn bus(config: &Config) -> Result<Option<BusTls>, TlsError> {
    if !(config.cluster_enabled && config.tls_cluster) {
        return Ok(None);
    }
    let needed = |name, file: Option<_>| file.ok_or(TlsError::ClusterMissingFile(name));
    let cert_file = needed("tls-cert-file", config.tls_cert_file.as_deref())?;
    let key_file = needed("tls-key-file", config.tls_key_file.as_deref())?;
    let ca_file = needed("tls-ca-cert-file", config.tls_ca_cert_file.as_deref())?;
    let chain = certificates("tls-cert-file", cert_file)?;
    let key = private_key(key_file)?;
    let roots = roots(ca_file)?;
    let provider = Arc::new(ring::default_provider());

    let verifier = client_verifier(
        ca_file,
        roots.clone(),
        TlsAuthClients::Yes,
        provider.clone(),
    )?;
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(unusable(cert_file, key_file))?;
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(unusable(cert_file, key_file))?;
    Ok(Some(BusTls {
        acceptor: TlsAcceptor::from(Arc::new(server)),
        connector: TlsConnector::from(Arc::new(client)),
    }))
}

/// The error for a certificate and key rustls will not use together.
fn unusable<'a>(
    cert: &'a Path,
    key: &'a Path,
) -> impl FnOnce(tokio_rustls::rustls::Error) -> TlsError + 'a {
    move |error| TlsError::Unusable {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        error: error.to_string(),
    }
}

/// The CA certificates of `ca_file`, each checked.
fn roots(ca_file: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for (index, cert) in certificates("tls-ca-cert-file", ca_file)?
        .into_iter()
        .enumerate()
    {
        roots.add(cert).map_err(|e| TlsError::BadCa {
            path: ca_file.to_path_buf(),
            index: index + 1,
            error: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// Checks client certificates against `roots`, the CAs of `ca_file`.
fn client_verifier(
    ca_file: &Path,
    roots: Arc<RootCertStore>,
    auth: TlsAuthClients,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn tokio_rustls::rustls::server::danger::ClientCertVerifier>, TlsError> {
    let builder = WebPkiClientVerifier::builder_with_provider(roots, provider);
    let builder = match auth {
        TlsAuthClients::Optional => builder.allow_unauthenticated(),
        TlsAuthClients::Yes | TlsAuthClients::No => builder,
    };
    builder.build().map_err(|e| TlsError::BadCa {
        path: ca_file.to_path_buf(),
        index: 0,
        error: e.to_string(),
    })
}

/// The certificates of a PEM file, at least one.
fn certificates(
    directive: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let text = read(directive, path)?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid_pem(directive, path, e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            directive,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key of a PEM file: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = read("tls-key-file", path)?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoKey(path.to_path_buf()),
        e => invalid_pem("tls-key-file", path, e),
    })
}

fn read(directive: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        directive,
        path: path.to_path_buf(),
        error,
    })
}

fn invalid_pem(directive: &'static str, path: &Path, error: pem::Error) -> TlsError {
    TlsError::InvalidPem {
        directive,
        path: path.to_path_buf(),
        error,
    }
}

#[cfg(test)]
mod tests;
