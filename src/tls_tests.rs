//! `tls-cluster`'s setup (`tls::bus`): when it reads the files, and the
//! start-up errors naming the directive and the file.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::config::Config;
use crate::tls::{self, TlsError};

/// A CA and one node certificate it signed, as files in `dir`.
struct Files {
    dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "bus CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        let files = Files {
            ca: dir.path().join("ca.pem"),
            cert: dir.path().join("node.pem"),
            key: dir.path().join("node.key"),
            dir,
        };
        std::fs::write(&files.ca, ca.pem()).unwrap();
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A cluster node's configuration with `tls-cluster yes` and the files.
    fn config(&self) -> Config {
        let mut config = Config::default();
        config.cluster_enabled = true;
        config.tls_cluster = true;
        config.tls_cert_file = Some(self.cert.clone());
        config.tls_key_file = Some(self.key.clone());
        config.tls_ca_cert_file = Some(self.ca.clone());
        config
    }
}

fn refusal(config: &Config) -> TlsError {
    match tls::bus(config) {
        Err(error) => error,
        Ok(tls) => panic!("accepted: {}", tls.is_some()),
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn the_bus_is_in_tls_only_in_a_cluster_with_tls_cluster_yes() {
    let files = Files::new();
    assert!(tls::bus(&files.config()).unwrap().is_some());
    // Either off: no TLS, and no file is read (these do not exist).
    let mut config = files.config();
    config.tls_cert_file = Some(files.dir.path().join("missing.pem"));
    config.tls_ca_cert_file = None;
    config.tls_cluster = false;
    assert!(tls::bus(&config).unwrap().is_none());
    config.tls_cluster = true;
    config.cluster_enabled = false;
    assert!(tls::bus(&config).unwrap().is_none());
}

#[test]
fn the_bus_requires_client_certificates_whatever_tls_auth_clients_says() {
    // Needs the CA even with tls-auth-clients no: peers are checked.
    let files = Files::new();
    let mut config = files.config();
    config.tls_auth_clients = crate::config::TlsAuthClients::No;
    assert!(tls::bus(&config).unwrap().is_some());
    config.tls_ca_cert_file = None;
    assert!(matches!(
        refusal(&config),
        TlsError::ClusterMissingFile("tls-ca-cert-file")
    ));
}

#[test]
fn tls_cluster_without_a_file_names_it() {
    let files = Files::new();
    let unset: [(&str, fn(&mut Config)); 3] = [
        ("tls-cert-file", |c| c.tls_cert_file = None),
        ("tls-key-file", |c| c.tls_key_file = None),
        ("tls-ca-cert-file", |c| c.tls_ca_cert_file = None),
    ];
    for (name, unset) in unset {
        let mut config = files.config();
        unset(&mut config);
        let error = refusal(&config);
        assert!(
            matches!(error, TlsError::ClusterMissingFile(missing) if missing == name),
            "{error:?}"
        );
        assert!(
            (error.to_string()).starts_with(&format!("tls-cluster is yes but {name} is not set")),
            "{error}"
        );
    }
}

#[test]
fn tls_cluster_with_a_bad_file_names_the_directive_and_the_file() {
    let files = Files::new();
    let missing = files.dir.path().join("missing.pem");
    let not_pem = files.file("notes.txt", "not a certificate\n");
    let junk = files.file(
        "junk.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let other_key = files.file("other.key", &KeyPair::generate().unwrap().serialize_pem());
    let cases: [(fn(&mut Config, PathBuf), &PathBuf, String); 6] = [
        (
            |c, p| c.tls_cert_file = Some(p),
            &missing,
            format!("cannot read tls-cert-file '{}'", display(&missing)),
        ),
        (
            |c, p| c.tls_cert_file = Some(p),
            &not_pem,
            format!(
                "tls-cert-file '{}' holds no PEM certificate",
                display(&not_pem)
            ),
        ),
        (
            |c, p| c.tls_key_file = Some(p),
            &files.cert,
            format!(
                "tls-key-file '{}' holds no unencrypted PEM private key",
                display(&files.cert)
            ),
        ),
        (
            |c, p| c.tls_key_file = Some(p),
            &other_key,
            format!(
                "tls-cert-file '{}' and tls-key-file '{}' do not make a usable certificate",
                display(&files.cert),
                display(&other_key)
            ),
        ),
        (
            |c, p| c.tls_ca_cert_file = Some(p),
            &missing,
            format!("cannot read tls-ca-cert-file '{}'", display(&missing)),
        ),
        (
            |c, p| c.tls_ca_cert_file = Some(p),
            &junk,
            format!("tls-ca-cert-file '{}'", display(&junk)),
        ),
    ];
    for (set, path, expected) in cases {
        let mut config = files.config();
        set(&mut config, path.clone());
        let error = refusal(&config).to_string();
        assert!(error.starts_with(&expected), "wanted {expected}: {error}");
    }
}
