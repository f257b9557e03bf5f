//! The two single values beside the log: `raft/vote` and
//! `raft/committed`, each one record replaced whole.
//!
//! The vote is fsynced (file, then directory) before `save_vote` returns:
//! a node that forgot a vote it granted could grant another in the same
//! term. Any damage to it stops the start.
//!
//! The committed log id is written without fsync. It is only a hint that
//! lets a restarted node re-apply its log up to where it was at once;
//! openraft works without it (the state machine then starts from its
//! snapshot and catches up when the leader next tells it the commit
//! index). It is written after the entries it covers are fsynced, so it
//! never points past the durable log; a process killed (`kill -9`) keeps
//! it, since the kernel still has it, and after a power loss it may be an
//! older value, or damaged and then ignored with a warning.

use std::io;
use std::path::Path;

use openraft::alias::{LogIdOf, VoteOf};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::super::disk::{self, OpenError, Record};
use super::super::types::TypeConfig;

pub(super) const VOTE_FILE: &str = "vote";
pub(super) const COMMITTED_FILE: &str = "committed";

/// A value as a file's one record.
pub(super) fn encode<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    disk::frame(
        &postcard::to_stdvec(value).map_err(io::Error::other)?,
        &mut out,
    )?;
    Ok(out)
}

/// The stored vote, if one was ever saved.
pub(super) fn load_vote(raft: &Path) -> Result<Option<VoteOf<TypeConfig>>, OpenError> {
    disk::remove_temp(raft, VOTE_FILE)?;
    let path = raft.join(VOTE_FILE);
    match disk::read_if_present(&path)? {
        None => Ok(None),
        Some(bytes) => decode(&bytes)
            .map(Some)
            .map_err(|why| OpenError::corrupt(&path, 0, why)),
    }
}

/// The stored committed log id; `None` if there is none or it is damaged.
pub(super) fn load_committed(raft: &Path) -> Result<Option<LogIdOf<TypeConfig>>, OpenError> {
    disk::remove_temp(raft, COMMITTED_FILE)?;
    let path = raft.join(COMMITTED_FILE);
    let Some(bytes) = disk::read_if_present(&path)? else {
        return Ok(None);
    };
    match decode(&bytes) {
        Ok(committed) => Ok(committed),
        Err(why) => {
            tracing::warn!(
                "The committed log id in {} is damaged ({why}); ignoring it: this node \
                 re-applies its log once the leader tells it what is committed",
                path.display()
            );
            Ok(None)
        }
    }
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match disk::next_record(bytes, 0) {
        Record::Intact { payload, end } if end == bytes.len() => {
            postcard::from_bytes(payload).map_err(|error| error.to_string())
        }
        Record::Intact { .. } => Err("bytes after its record".into()),
        Record::End => Err("empty".into()),
        Record::Torn(why) | Record::Damaged(why) => Err(why),
    }
}
