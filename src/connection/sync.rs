//! `SYNC` on a cluster node: the node's Raft snapshot file, sent as Redis
//! sends its RDB file to a replica or to `redis-cli --rdb` (`$<length>`,
//! CRLF, the file's bytes, nothing after them), then the connection is
//! closed, as Redis closes an `rdb-only` replica's. So a backup can be
//! pulled over the client port, with its AUTH and TLS, and is the same
//! file a copy of `dir/raft/snapshot` gives.
//!
//! The file is replaced by renaming a new one over it: opened once and
//! read whole, it is one snapshot, the latest saved when `SYNC` arrived.

use std::io::{self, Read};
use std::path::PathBuf;

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::cluster::{disk, snapshot_file};
use crate::reply::Reply;

/// On a single node, which has no snapshot.
pub(super) const SINGLE: &str = "ERR SYNC is for cluster mode: a single node keeps no snapshot; \
     back up its append-only log and token-ceiling";

/// The reply to `SYNC` on a node whose data directory is `dir`.
pub(super) fn snapshot(dir: PathBuf) -> BoxFuture<'static, Reply> {
    let path = snapshot_file::path(&dir.join(disk::RAFT_DIR));
    async move {
        let read = tokio::task::spawn_blocking(move || payload(&path).map_err(|e| (path, e)));
        match read.await {
            Ok(Ok(payload)) => payload,
            Ok(Err((path, error))) if error.kind() == io::ErrorKind::NotFound => {
                Reply::error(format!(
                    "ERR this node has no snapshot yet ({} is missing): send BGSAVE, wait for \
                     rdb_bgsave_in_progress:0 in INFO persistence, and SYNC again",
                    path.display()
                ))
            }
            Ok(Err((path, error))) => Reply::error(format!(
                "ERR cannot read the snapshot {}: {error}",
                path.display()
            )),
            Err(error) => Reply::error(format!("ERR cannot read the snapshot: {error}")),
        }
    }
    .boxed()
}

/// The file at `path` framed as Redis frames an RDB transfer, read
/// straight after its header (a snapshot can be large: one copy of it).
fn payload(path: &std::path::Path) -> io::Result<Reply> {
    let file = std::fs::File::open(path)?;
    let length = file.metadata()?.len();
    let header = format!("${length}\r\n");
    let mut out = Vec::with_capacity(header.len() + length as usize);
    out.extend_from_slice(header.as_bytes());
    file.take(length).read_to_end(&mut out)?;
    if out.len() - header.len() != length as usize {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the file shrank while read",
        ));
    }
    Ok(Reply::Raw(Bytes::from(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_snapshot_file_is_sent_whole_after_its_length() {
        let temp = tempfile::tempdir().unwrap();
        let raft = temp.path().join("raft");
        let missing = snapshot(temp.path().to_path_buf()).await;
        assert!(
            matches!(&missing, Reply::Error(e) if e.contains("no snapshot yet")),
            "{missing:?}"
        );
        std::fs::create_dir(&raft).unwrap();
        std::fs::write(raft.join("snapshot"), b"leased raft snapshot 2\n\x00\x01").unwrap();
        match snapshot(temp.path().to_path_buf()).await {
            Reply::Raw(bytes) => assert_eq!(&bytes[..], b"$25\r\nleased raft snapshot 2\n\x00\x01"),
            other => panic!("{other:?}"),
        }
    }
}
