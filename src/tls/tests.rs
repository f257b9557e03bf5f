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
        Config {
            cluster_enabled: true,
            tls_cluster: true,
            tls_cert_file: Some(self.cert.clone()),
            tls_key_file: Some(self.key.clone()),
            tls_ca_cert_file: Some(self.ca.clone()),
            ..Config::default()
        }
    }
}

/// Sets the file `directive` names.
fn set_file(config: &mut Config, directive: &str, path: Option<&Path>) {
    let field = match directive {
        "tls-cert-file" => &mut config.tls_cert_file,
        "tls-key-file" => &mut config.tls_key_file,
        "tls-ca-cert-file" => &mut config.tls_ca_cert_file,
        other => panic!("no file directive {other}"),
    };
    *field = path.map(Path::to_path_buf);
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
    for name in ["tls-cert-file", "tls-key-file", "tls-ca-cert-file"] {
        let mut config = files.config();
        set_file(&mut config, name, None);
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
    let cases = [
        (
            "tls-cert-file",
            &missing,
            format!("cannot read tls-cert-file '{}'", display(&missing)),
        ),
        (
            "tls-cert-file",
            &not_pem,
            format!(
                "tls-cert-file '{}' holds no PEM certificate",
                display(&not_pem)
            ),
        ),
        (
            "tls-key-file",
            &files.cert,
            format!(
                "tls-key-file '{}' holds no unencrypted PEM private key",
                display(&files.cert)
            ),
        ),
        (
            "tls-key-file",
            &other_key,
            format!(
                "tls-cert-file '{}' and tls-key-file '{}' do not make a usable certificate",
                display(&files.cert),
                display(&other_key)
            ),
        ),
        (
            "tls-ca-cert-file",
            &missing,
            format!("cannot read tls-ca-cert-file '{}'", display(&missing)),
        ),
        (
            "tls-ca-cert-file",
            &junk,
            format!("tls-ca-cert-file '{}'", display(&junk)),
        ),
    ];
    for (directive, path, expected) in cases {
        let mut config = files.config();
        set_file(&mut config, directive, Some(path));
        let error = refusal(&config).to_string();
        assert!(error.starts_with(&expected), "wanted {expected}: {error}");
    }
}
