//! TLS for `tls-port`: the server's certificate and key and the
//! client-certificate policy, loaded once at start-up into one rustls
//! configuration that every TLS connection shares.
//!
//! Every mistake is found before the server listens, and its message names
//! the directive and the file, so a server that starts has a TLS setup
//! that works.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

pub use tokio_rustls::TlsAcceptor;

use crate::config::{Config, TlsAuthClients};

/// How long a client has to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The acceptor for `tls-port`, or `None` when `tls-port` is 0 (the other
/// TLS directives are then not read).
pub fn acceptor(config: &Config) -> Result<Option<TlsAcceptor>, String> {
    if config.tls_port == 0 {
        return Ok(None);
    }
    let server_config = server_config(config)?;
    Ok(Some(TlsAcceptor::from(Arc::new(server_config))))
}

fn server_config(config: &Config) -> Result<ServerConfig, String> {
    let (Some(cert_file), Some(key_file)) = (&config.tls_cert_file, &config.tls_key_file) else {
        let missing = if config.tls_cert_file.is_none() {
            "tls-cert-file"
        } else {
            "tls-key-file"
        };
        return Err(format!(
            "tls-port is set but {missing} is not: set tls-cert-file and tls-key-file \
             to the server's certificate chain and private key (PEM)"
        ));
    };
    // Checked before any file is read, so the first error is the one that
    // needs fixing first.
    let ca_file = match (config.tls_auth_clients, &config.tls_ca_cert_file) {
        (TlsAuthClients::No, _) => None,
        (_, Some(ca_file)) => Some(ca_file),
        (auth, None) => {
            return Err(format!(
                "tls-auth-clients is {} but tls-ca-cert-file is not set: set tls-ca-cert-file \
                 to the CA certificates (PEM) that sign client certificates, or set \
                 'tls-auth-clients no'",
                auth.as_str()
            ));
        }
    };

    let chain = certificates("tls-cert-file", cert_file)?;
    let key = private_key(key_file)?;
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    let builder = match ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => builder.with_client_cert_verifier(client_verifier(
            ca_file,
            config.tls_auth_clients,
            provider,
        )?),
    };
    builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "tls-cert-file '{}' and tls-key-file '{}' do not make a usable certificate: {e}",
            cert_file.display(),
            key_file.display()
        )
    })
}

/// Checks client certificates against the CAs of `ca_file`.
fn client_verifier(
    ca_file: &Path,
    auth: TlsAuthClients,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn tokio_rustls::rustls::server::danger::ClientCertVerifier>, String> {
    let mut roots = RootCertStore::empty();
    for (index, cert) in certificates("tls-ca-cert-file", ca_file)?
        .into_iter()
        .enumerate()
    {
        roots.add(cert).map_err(|e| {
            format!(
                "tls-ca-cert-file '{}': certificate {} is not a usable CA certificate: {e}",
                ca_file.display(),
                index + 1
            )
        })?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    let builder = match auth {
        TlsAuthClients::Optional => builder.allow_unauthenticated(),
        TlsAuthClients::Yes | TlsAuthClients::No => builder,
    };
    builder
        .build()
        .map_err(|e| format!("tls-ca-cert-file '{}': {e}", ca_file.display()))
}

/// The certificates of a PEM file, at least one.
fn certificates(directive: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let text = read(directive, path)?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid_pem(directive, path, e))?;
    if certs.is_empty() {
        return Err(format!(
            "{directive} '{}' holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The first private key of a PEM file: PKCS#8, PKCS#1 (RSA) or SEC1 (EC).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let text = read("tls-key-file", path)?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        pem::Error::NoItemsFound => format!(
            "tls-key-file '{}' holds no unencrypted PEM private key \
             (PKCS#8, PKCS#1 or SEC1)",
            path.display()
        ),
        e => invalid_pem("tls-key-file", path, e),
    })
}

fn read(directive: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {directive} '{}': {e}", path.display()))
}

fn invalid_pem(directive: &str, path: &Path, error: pem::Error) -> String {
    format!("{directive} '{}' is not valid PEM: {error}", path.display())
}
