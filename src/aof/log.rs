//! The log file itself: changes queued per round, written with one
//! `write` (and with `always` one fsync) per commit, and the rewrite that
//! replaces the file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tracing::{info, warn};

use super::format::{self, HEADER, Round};
use super::fsync::Syncer;
use super::load::{Recovery, create_log, replay_file};
use super::rewrite::{Rewrite, RewriteStep};
use super::{FsyncPolicy, LogOptions, OpenError, RewriteError, WriteError, rewrite_path};
use crate::registry::{Change, Registry};

/// After a failed write, changes are refused this long before the next try.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What `INFO persistence` reports about the log.
#[derive(Clone, Debug)]
pub struct LogStatus {
    pub policy: FsyncPolicy,
    pub size: u64,
    pub base_size: u64,
    pub last_write_ok: bool,
    pub last_fsync_ok: bool,
    pub rewrite_in_progress: bool,
    pub rewrites: u64,
    pub last_rewrite_ok: bool,
    /// Seconds the last rewrite took, or -1 if none finished.
    pub last_rewrite_secs: i64,
}

/// What a commit's changes are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// Changes whose replies wait for the commit: they are made as durable
    /// as `appendfsync` says first.
    Replies,
    /// The server's own changes (reclaimed leases), acknowledged to nobody:
    /// written, and fsynced by the next `Replies` commit or the `everysec`
    /// thread, so that a mass reclaim under `appendfsync always` costs one
    /// write per step rather than one fsync.
    Background,
}

pub struct Log {
    path: PathBuf,
    dir: PathBuf,
    options: LogOptions,
    file: Arc<File>,
    /// Bytes in the file, all written successfully.
    len: u64,
    /// The size after the last rewrite or load: growth is measured from it.
    base_len: u64,
    /// Changes not yet written.
    pending: Round,
    /// The last write failure, and when it happened.
    write_error: Option<(Instant, WriteError)>,
    syncer: Option<Syncer>,
    rewrite: Option<Rewrite>,
    rewrites: u64,
    last_rewrite_ok: bool,
    last_rewrite_secs: i64,
}

impl Log {
    /// Opens the log in `options.dir`, creating it if missing, and replays it
    /// through `apply`. A torn final record is cut off; a corrupt record
    /// stops the start unless `load_good_prefix` is set.
    pub fn open(
        options: LogOptions,
        apply: impl FnMut(Change),
    ) -> Result<(Log, Recovery), OpenError> {
        let path = options.dir.join(&options.file_name);
        let temp = rewrite_path(&path);
        if temp.exists() {
            // Left by a crash during a rewrite; the log itself is complete.
            fs::remove_file(&temp).map_err(OpenError::io(&temp))?;
        }
        let mut recovery = Recovery::default();
        if path.exists() {
            recovery = replay_file(&path, options.load_good_prefix, apply)?;
        }
        if fs::metadata(&path).map_or(true, |m| m.len() < HEADER.len() as u64) {
            create_log(&path, &options.dir).map_err(OpenError::io(&path))?;
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(OpenError::io(&path))?;
        let len = file.metadata().map_err(OpenError::io(&path))?.len();
        let file = Arc::new(file);
        let syncer = (options.policy == FsyncPolicy::EverySec).then(|| Syncer::start(file.clone()));
        let log = Log {
            path,
            dir: options.dir.clone(),
            options,
            file,
            len,
            base_len: len,
            pending: Round::default(),
            write_error: None,
            syncer,
            rewrite: None,
            rewrites: 0,
            last_rewrite_ok: true,
            last_rewrite_secs: -1,
        };
        Ok((log, recovery))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues a change for the next [`Log::commit`].
    pub fn append(&mut self, change: &Change) {
        self.pending.push(change);
    }

    /// Why changes are refused right now, if they are: the last write or
    /// fsync failed and the log may be missing what it acknowledged.
    pub fn failure(&self) -> Option<WriteError> {
        if let Some((_, error)) = &self.write_error {
            return Some(error.clone());
        }
        self.syncer.as_ref()?.error()
    }

    /// `CONFIG SET appendfsync`: from the next commit on. Leaving
    /// `everysec` stops its thread; with `always` the next commit's fsync
    /// covers whatever that thread had not synced yet.
    pub fn set_fsync(&mut self, policy: FsyncPolicy) {
        self.options.policy = policy;
        match (policy, self.syncer.take()) {
            (FsyncPolicy::EverySec, None) => self.syncer = Some(Syncer::start(self.file.clone())),
            (FsyncPolicy::EverySec, running) => self.syncer = running,
            (_, Some(running)) => running.stop(),
            (_, None) => {}
        }
    }

    /// `CONFIG SET auto-aof-rewrite-percentage|auto-aof-rewrite-min-size`.
    pub fn set_rewrite_thresholds(&mut self, percentage: u64, min_size: u64) {
        self.options.rewrite_percentage = percentage;
        self.options.rewrite_min_size = min_size;
    }

    /// Writes the queued changes (and with `always` fsyncs them). On failure
    /// the file is cut back to its last good length and the changes stay
    /// queued for the next try.
    pub async fn commit(&mut self, commit: Commit) -> Result<(), WriteError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if let Some((when, error)) = &self.write_error
            && when.elapsed() < RETRY_AFTER
        {
            return Err(error.clone());
        }
        match self.write_pending(commit).await {
            Ok(()) => {
                self.write_error = None;
                Ok(())
            }
            Err(error) => {
                let _ = self.file.set_len(self.len);
                tracing::error!("Writing the append-only log failed: {error}");
                let error = WriteError::new(&error);
                self.write_error = Some((Instant::now(), error.clone()));
                Err(error)
            }
        }
    }

    async fn write_pending(&mut self, commit: Commit) -> io::Result<()> {
        self.pending.close();
        (&*self.file).write_all(self.pending.bytes())?;
        if self.options.policy == FsyncPolicy::Always && commit == Commit::Replies {
            // Off the runtime's worker threads: a slow disk holds up only
            // the replies that wait for it.
            let file = self.file.clone();
            tokio::task::spawn_blocking(move || file.sync_data())
                .await
                .map_err(io::Error::other)??;
        }
        if let Some(syncer) = &self.syncer {
            syncer.mark_dirty();
        }
        self.len += self.pending.bytes().len() as u64;
        if let Some(rewrite) = &mut self.rewrite {
            rewrite.since_start.append(self.pending.bytes());
        }
        self.pending.clear();
        Ok(())
    }

    /// Flushes everything to disk, for a clean shutdown. A rewrite under
    /// way is abandoned: the log is complete without it.
    pub async fn close(mut self) -> Result<(), WriteError> {
        if let Some(rewrite) = self.rewrite.take() {
            rewrite.abandon();
        }
        if let Some(syncer) = self.syncer.take() {
            syncer.stop();
        }
        self.commit(Commit::Background).await?;
        self.file
            .sync_all()
            .map_err(|error| WriteError::new(&error))
    }

    /// Whether the log has outgrown its live state enough to rewrite it.
    pub fn wants_rewrite(&self) -> bool {
        let percentage = self.options.rewrite_percentage;
        self.rewrite.is_none()
            && percentage > 0
            && self.len >= self.options.rewrite_min_size
            && self.len.saturating_sub(self.base_len) >= self.base_len / 100 * percentage
    }

    pub fn rewriting(&self) -> bool {
        self.rewrite.is_some()
    }

    /// Starts rewriting the log as a snapshot of `registry`. Call it with
    /// nothing queued, right after a commit.
    pub fn start_rewrite(&mut self, registry: &Registry) -> Result<(), RewriteError> {
        if self.rewrite.is_some() {
            return Err(RewriteError::InProgress);
        }
        let mut head = BytesMut::from(HEADER);
        format::encode(&Change::LastToken(registry.last_token()), &mut head);
        if registry.time().is_finite() {
            format::encode(&Change::Time(registry.time()), &mut head);
        }
        let temp = rewrite_path(&self.path);
        let rewrite = Rewrite::start(temp, head.to_vec()).map_err(|error| {
            self.last_rewrite_ok = false;
            RewriteError::Start(error)
        })?;
        info!("Background append only file rewriting started");
        self.rewrite = Some(rewrite);
        Ok(())
    }

    /// Moves a rewrite under way forward: encodes the next slots of the
    /// snapshot, or installs the new file once it is written. Returns
    /// whether there is more to do right away (the caller should come back
    /// soon rather than wait for requests).
    pub fn step_rewrite(&mut self, registry: &Registry) -> RewriteStep {
        let Some(rewrite) = &mut self.rewrite else {
            return RewriteStep::Idle;
        };
        if rewrite.chunks.is_some() {
            return rewrite.send_chunk(registry);
        }
        match rewrite.written.try_recv() {
            Err(TryRecvError::Empty) => RewriteStep::Waiting,
            Err(TryRecvError::Disconnected) => {
                self.fail_rewrite("the rewrite writer stopped".into());
                RewriteStep::Idle
            }
            Ok(Err(error)) => {
                self.fail_rewrite(error.to_string());
                RewriteStep::Idle
            }
            Ok(Ok(file)) => {
                let rewrite = self.rewrite.take().expect("checked above");
                if let Err(error) = self.install(rewrite, file) {
                    self.fail_rewrite(error.to_string());
                }
                RewriteStep::Idle
            }
        }
    }

    fn fail_rewrite(&mut self, error: String) {
        warn!("Rewriting the append-only log failed: {error}");
        if let Some(rewrite) = self.rewrite.take() {
            rewrite.abandon();
        }
        self.last_rewrite_ok = false;
    }

    /// Appends the changes made during the rewrite to the new file, makes it
    /// durable, and puts it in the log's place.
    fn install(&mut self, rewrite: Rewrite, file: File) -> io::Result<()> {
        let mut file = file;
        for piece in rewrite.since_start.pieces() {
            file.write_all(piece)?;
        }
        file.sync_all()?;
        let len = file.metadata()?.len();
        fs::rename(&rewrite.temp, &self.path)?;
        // From the rename on the new file is the log: write there even if
        // what follows fails.
        self.len = len;
        self.base_len = len;
        let old = std::mem::replace(&mut self.file, Arc::new(file));
        let old_synced = self.syncer.as_ref().map(|s| s.switch(self.file.clone()));
        // Closing the replaced log frees its blocks, which takes milliseconds
        // for a large file: not on the core task.
        let _ = std::thread::Builder::new()
            .name("leased-close".into())
            .spawn(move || drop((old, old_synced)));
        File::open(&self.dir)?.sync_all()?;
        self.rewrites += 1;
        self.last_rewrite_ok = true;
        self.last_rewrite_secs = rewrite.started.elapsed().as_secs() as i64;
        info!(
            "Background AOF rewrite finished successfully: {} bytes",
            self.len
        );
        Ok(())
    }

    pub fn status(&self) -> LogStatus {
        LogStatus {
            policy: self.options.policy,
            size: self.len,
            base_size: self.base_len,
            last_write_ok: self.write_error.is_none(),
            last_fsync_ok: self.syncer.as_ref().is_none_or(|s| s.error().is_none()),
            rewrite_in_progress: self.rewrite.is_some(),
            rewrites: self.rewrites,
            last_rewrite_ok: self.last_rewrite_ok,
            last_rewrite_secs: self.last_rewrite_secs,
        }
    }
}
