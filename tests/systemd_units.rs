//! The shipped systemd files pass `systemd-analyze verify`: the unit
//! (conf/leased.service) alone, and with the cluster node's drop-in
//! (conf/cluster/leased-cluster.conf) in its `leased.service.d/`.
//!
//! Each test needs `systemd-analyze` (systemd), so each is marked ignored:
//! plain `cargo test` lists it with that reason, and `cargo test --
//! --include-ignored` runs it, failing if the program is missing.

mod common;

use std::path::Path;
use std::process::{Command, Output};

const UNIT: &str = include_str!("../conf/leased.service");
const CLUSTER_DROP_IN: &str = include_str!("../conf/cluster/leased-cluster.conf");

/// `systemd-analyze verify leased.service` over a unit directory holding
/// the unit (its binary this build's) and, if given, a drop-in.
fn verify(drop_in: Option<&str>) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = UNIT.replace("/usr/local/bin/leased", common::binary::BINARY);
    std::fs::write(dir.path().join("leased.service"), unit).unwrap();
    if let Some(drop_in) = drop_in {
        let drop_ins = dir.path().join("leased.service.d");
        std::fs::create_dir(&drop_ins).unwrap();
        std::fs::write(drop_ins.join("cluster.conf"), drop_in).unwrap();
    }
    // The trailing colon keeps systemd's own directories in the path, for
    // the targets the unit names.
    let path = format!("{}:", dir.path().display());
    Command::new("systemd-analyze")
        .args(["verify", "leased.service"])
        .env("SYSTEMD_UNIT_PATH", path)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("systemd-analyze is installed")
}

fn assert_clean(output: &Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "systemd-analyze failed: {stderr}");
    assert!(stderr.trim().is_empty(), "warnings: {stderr}");
}

#[test]
#[ignore = "needs systemd-analyze (systemd); run with --include-ignored"]
fn the_unit_verifies() {
    assert_clean(&verify(None));
}

#[test]
#[ignore = "needs systemd-analyze (systemd); run with --include-ignored"]
fn the_unit_with_the_cluster_drop_in_verifies() {
    assert_clean(&verify(Some(CLUSTER_DROP_IN)));
    // The drop-in is read: a bad line in it is reported.
    let broken = format!("{CLUSTER_DROP_IN}\nNoSuchSetting=1\n");
    let output = verify(Some(&broken));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cluster.conf") && stderr.contains("NoSuchSetting"),
        "{stderr}"
    );
}
