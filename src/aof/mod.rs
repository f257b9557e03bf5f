//! The append-only log: every change of the registry goes here before the
//! client sees its reply; at start-up the log is replayed; when it has
//! grown well past the live state it is rewritten as a snapshot of it.
//!
//! Only the core task touches a [`Log`]. It encodes each round's changes
//! into one buffer and writes them with one `write` (and, with `always`, one
//! fsync) before answering the round: group commit. The `always` fsync runs
//! on the runtime's blocking pool while the core task waits for it, so the
//! connections go on reading requests meanwhile. With `everysec` a thread
//! of its own fsyncs once a second; with `no` the OS decides.
//!
//! A rewrite runs while the server serves. The core walks the registry a
//! few thousand slots at a time (see `Registry::snapshot`) and hands the
//! encoded leases to a writer thread that fills a temporary file; every
//! change committed meanwhile is kept aside too. When the snapshot is on
//! disk, the core appends the changes kept aside, fsyncs, and renames the
//! file over the log. Changes set state outright, so the snapshot does not
//! need to be consistent: replaying the changes made since it began fixes
//! whatever moved under it. A crash at any point leaves either the old log
//! or the new one, both complete.

pub mod format;

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use tracing::{info, warn};

use crate::registry::{Change, Registry};
use format::{HEADER, ReplayError};

pub use crate::config::FsyncPolicy;

/// Settings the log needs, from the configuration.
#[derive(Clone, Debug)]
pub struct LogOptions {
    pub dir: PathBuf,
    pub file_name: String,
    pub policy: FsyncPolicy,
    pub rewrite_percentage: u64,
    pub rewrite_min_size: u64,
    pub load_good_prefix: bool,
}

/// Slots of the registry encoded per rewrite step: small enough that a
/// step costs the core about a tenth of a millisecond (measured: 4096
/// slots a step doubled request latency during a rewrite).
const REWRITE_CHUNK: usize = 1024;
/// Bytes the rewrite writer writes between two fsyncs.
const INCREMENTAL_FSYNC: usize = 4 << 20;
/// Encoded chunks queued for the rewrite writer before the core waits.
const REWRITE_QUEUE: usize = 16;
/// Changes made during a rewrite beyond this many bytes go to the writer
/// thread; the rest the core writes itself when it installs the new file.
const CATCH_UP: usize = 1 << 20;
/// After a failed write, changes are refused this long before the next try.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the log did at start-up, for the log lines.
#[derive(Debug, Default)]
pub struct Recovery {
    pub records: u64,
    /// A torn final record was cut off at this offset.
    pub torn_at: Option<u64>,
    /// The log was corrupt at this offset and, as asked, cut there; the whole
    /// file was first copied to the path given.
    pub corrupt_cut: Option<(u64, PathBuf)>,
}

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

pub struct Log {
    path: PathBuf,
    dir: PathBuf,
    options: LogOptions,
    file: Arc<File>,
    /// Bytes in the file, all written successfully.
    len: u64,
    /// The size after the last rewrite or load: growth is measured from it.
    base_len: u64,
    /// Encoded changes not yet written.
    pending: BytesMut,
    /// The last write failure, and when it happened.
    write_error: Option<(Instant, String)>,
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
    pub fn open(options: LogOptions, apply: impl FnMut(Change)) -> Result<(Log, Recovery), String> {
        let path = options.dir.join(&options.file_name);
        let temp = rewrite_path(&path);
        if temp.exists() {
            // Left by a crash during a rewrite; the log itself is complete.
            fs::remove_file(&temp).map_err(|e| describe(&temp, e))?;
        }
        let mut recovery = Recovery::default();
        if path.exists() {
            recovery = replay_file(&path, options.load_good_prefix, apply)?;
        }
        if fs::metadata(&path).map_or(true, |m| m.len() < HEADER.len() as u64) {
            create_log(&path, &options.dir).map_err(|e| describe(&path, e))?;
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| describe(&path, e))?;
        let len = file.metadata().map_err(|e| describe(&path, e))?.len();
        let file = Arc::new(file);
        let syncer = (options.policy == FsyncPolicy::EverySec).then(|| Syncer::start(file.clone()));
        let log = Log {
            path,
            dir: options.dir.clone(),
            options,
            file,
            len,
            base_len: len,
            pending: BytesMut::new(),
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
        format::encode(change, &mut self.pending);
    }

    /// Why changes are refused right now, if they are: the last write or
    /// fsync failed and the log may be missing what it acknowledged.
    pub fn refusal(&self) -> Option<String> {
        if let Some((_, error)) = &self.write_error {
            return Some(misconf(error));
        }
        let syncer = self.syncer.as_ref()?;
        syncer.error().map(|error| misconf(&error))
    }

    /// Writes the queued changes (and with `always` fsyncs them). On failure
    /// the file is cut back to its last good length and the changes stay
    /// queued for the next try; the error is the reply for the changes.
    pub async fn commit(&mut self) -> Result<(), String> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if let Some((when, error)) = &self.write_error
            && when.elapsed() < RETRY_AFTER
        {
            return Err(misconf(error));
        }
        match self.write_pending().await {
            Ok(()) => {
                self.write_error = None;
                Ok(())
            }
            Err(error) => {
                let _ = self.file.set_len(self.len);
                let error = error.to_string();
                tracing::error!("Writing the append-only log failed: {error}");
                self.write_error = Some((Instant::now(), error.clone()));
                Err(misconf(&error))
            }
        }
    }

    async fn write_pending(&mut self) -> io::Result<()> {
        (&*self.file).write_all(&self.pending)?;
        if self.options.policy == FsyncPolicy::Always {
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
        self.len += self.pending.len() as u64;
        if let Some(rewrite) = &mut self.rewrite {
            rewrite.since_start.extend_from_slice(&self.pending);
        }
        self.pending.clear();
        Ok(())
    }

    /// Flushes everything to disk, for a clean shutdown. A rewrite under
    /// way is abandoned: the log is complete without it.
    pub async fn close(mut self) -> Result<(), String> {
        if let Some(rewrite) = self.rewrite.take() {
            rewrite.abandon();
        }
        if let Some(syncer) = self.syncer.take() {
            syncer.stop();
        }
        self.commit().await?;
        self.file.sync_all().map_err(|e| describe(&self.path, e))
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
    pub fn start_rewrite(&mut self, registry: &Registry) -> Result<(), String> {
        if self.rewrite.is_some() {
            return Err("ERR Background append only file rewriting already in progress".into());
        }
        let mut head = BytesMut::from(HEADER);
        format::encode(&Change::LastToken(registry.last_token()), &mut head);
        if registry.time().is_finite() {
            format::encode(&Change::Time(registry.time()), &mut head);
        }
        let temp = rewrite_path(&self.path);
        let rewrite = Rewrite::start(temp, head.to_vec()).map_err(|e| {
            self.last_rewrite_ok = false;
            format!("ERR cannot start rewriting the append-only log: {e}")
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
        file.write_all(&rewrite.since_start)?;
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

/// What a rewrite step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RewriteStep {
    /// No rewrite under way.
    Idle,
    /// Encoded part of the snapshot; more remains.
    Progress,
    /// Waiting for the writer: nothing to do for now.
    Waiting,
}

/// The reply to a change the log could not take, as Redis words it.
fn misconf(error: &str) -> String {
    format!("MISCONF Errors writing to the AOF file: {error}")
}

fn describe(path: &Path, error: io::Error) -> String {
    format!("'{}': {error}", path.display())
}

/// `path` with `suffix` added to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

fn rewrite_path(path: &Path) -> PathBuf {
    sibling(path, ".rewrite")
}

/// Writes an empty log (just the header) atomically and durably.
fn create_log(path: &Path, dir: &Path) -> io::Result<()> {
    let temp = sibling(path, ".new");
    let mut file = File::create(&temp)?;
    file.write_all(HEADER)?;
    file.sync_all()?;
    fs::rename(&temp, path)?;
    File::open(dir)?.sync_all()
}

/// Replays the log at `path`, cutting a torn tail and, if allowed, a corrupt
/// one.
fn replay_file(
    path: &Path,
    load_good_prefix: bool,
    apply: impl FnMut(Change),
) -> Result<Recovery, String> {
    let file = File::open(path).map_err(|e| describe(path, e))?;
    let len = file.metadata().map_err(|e| describe(path, e))?.len();
    let mut recovery = Recovery::default();
    match format::replay(BufReader::with_capacity(1 << 20, file), apply) {
        Ok(replayed) => {
            recovery.records = replayed.records;
            if let Some(offset) = replayed.torn_at {
                warn!(
                    "The append-only log {} ends with an incomplete record at byte offset \
                     {offset} (a write cut short by a crash): cutting the last {} bytes off",
                    path.display(),
                    len - offset
                );
                truncate(path, offset)?;
                recovery.torn_at = Some(offset);
            }
        }
        Err(ReplayError::BadHeader) => {
            return Err(format!(
                "'{}' is not a leased append-only log (it does not start with leased's \
                 header); move it away or point appendfilename elsewhere",
                path.display()
            ));
        }
        Err(ReplayError::Io(error)) => return Err(format!("'{}': {error}", path.display())),
        Err(ReplayError::Corrupt {
            offset,
            reason,
            replayed,
        }) => {
            if !load_good_prefix {
                return Err(format!(
                    "The append-only log {} is corrupt at byte offset {offset} ({reason}). \
                     The {} records before it are intact. Restore the log from a backup, or \
                     start with 'aof-load-good-prefix yes' (--aof-load-good-prefix yes) to load \
                     them and drop everything from offset {offset} on; a copy of the whole \
                     file is kept",
                    path.display(),
                    replayed.records
                ));
            }
            let copy = keep_copy(path)?;
            warn!(
                "The append-only log {} is corrupt at byte offset {offset} ({reason}): \
                 loaded the {} records before it and cut the rest off, as \
                 aof-load-good-prefix asks; the whole file was copied to {}",
                path.display(),
                replayed.records,
                copy.display()
            );
            truncate(path, offset)?;
            recovery.records = replayed.records;
            recovery.corrupt_cut = Some((offset, copy));
        }
    }
    Ok(recovery)
}

fn truncate(path: &Path, len: u64) -> Result<(), String> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| describe(path, e))?;
    file.set_len(len).map_err(|e| describe(path, e))?;
    file.sync_all().map_err(|e| describe(path, e))
}

/// Copies a damaged log aside before it is cut, so nothing is destroyed.
fn keep_copy(path: &Path) -> Result<PathBuf, String> {
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let copy = sibling(path, &format!(".corrupt-{stamp}"));
    fs::copy(path, &copy).map_err(|e| describe(&copy, e))?;
    Ok(copy)
}

/// A rewrite under way.
struct Rewrite {
    temp: PathBuf,
    /// Encoded snapshot chunks for the writer; dropped to say "done".
    chunks: Option<SyncSender<BytesMut>>,
    /// The writer's answer: the finished, fsynced file.
    written: Receiver<io::Result<File>>,
    /// The next registry slot to encode, until the snapshot is complete.
    cursor: Option<usize>,
    /// Everything committed since the rewrite began.
    since_start: BytesMut,
    started: Instant,
    /// A chunk the writer had no room for yet.
    held: Option<BytesMut>,
}

impl Rewrite {
    fn start(temp: PathBuf, head: Vec<u8>) -> io::Result<Rewrite> {
        let _ = fs::remove_file(&temp);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&temp)?;
        let (chunks, incoming) = mpsc::sync_channel::<BytesMut>(REWRITE_QUEUE);
        let (done, written) = mpsc::channel();
        std::thread::Builder::new()
            .name("leased-rewrite".into())
            .spawn(move || {
                let _ = done.send(write_snapshot(file, head, incoming));
            })?;
        Ok(Rewrite {
            temp,
            chunks: Some(chunks),
            written,
            cursor: Some(0),
            since_start: BytesMut::new(),
            started: Instant::now(),
            held: None,
        })
    }

    /// Encodes the next slots (or retries a chunk the writer had no room
    /// for) and hands them to the writer; closes the channel after the last.
    fn send_chunk(&mut self, registry: &Registry) -> RewriteStep {
        let Some(chunks) = &self.chunks else {
            return RewriteStep::Waiting;
        };
        let chunk = match (self.held.take(), self.cursor) {
            (Some(chunk), _) => chunk,
            (None, Some(from)) => {
                let mut out = BytesMut::new();
                self.cursor = registry.snapshot(from, REWRITE_CHUNK, |lease| {
                    format::encode_lease(&lease, &mut out)
                });
                out
            }
            // The snapshot is out; the writer also takes the changes made
            // since it began, so that few are left for the core to write
            // when it installs the file.
            (None, None) if self.since_start.len() > CATCH_UP => {
                std::mem::take(&mut self.since_start)
            }
            (None, None) => BytesMut::new(),
        };
        match chunks.try_send(chunk) {
            Ok(()) => {}
            Err(TrySendError::Full(chunk)) => {
                self.held = Some(chunk);
                return RewriteStep::Waiting;
            }
            Err(TrySendError::Disconnected(_)) => {
                self.cursor = None;
            }
        }
        if self.cursor.is_none() && self.held.is_none() && self.since_start.len() <= CATCH_UP {
            // The snapshot is complete: closing the channel tells the writer.
            self.chunks = None;
        }
        RewriteStep::Progress
    }

    fn abandon(self) {
        drop(self.chunks);
        let _ = fs::remove_file(&self.temp);
    }
}

/// The rewrite writer thread: the header, then chunks until the channel
/// closes, then fsync. It fsyncs every few MiB on the way, as Redis's
/// `aof-rewrite-incremental-fsync` does: one large flush at the end would
/// hold up the log's own fsyncs behind it (a journal commit waits for it).
fn write_snapshot(mut file: File, head: Vec<u8>, chunks: Receiver<BytesMut>) -> io::Result<File> {
    file.write_all(&head)?;
    let mut unsynced = 0;
    for chunk in chunks {
        file.write_all(&chunk)?;
        unsynced += chunk.len();
        if unsynced >= INCREMENTAL_FSYNC {
            file.sync_data()?;
            unsynced = 0;
        }
    }
    file.sync_all()?;
    Ok(file)
}

/// The `everysec` fsync thread.
struct Syncer {
    shared: Arc<SyncShared>,
    thread: Option<JoinHandle<()>>,
}

struct SyncShared {
    file: Mutex<Arc<File>>,
    dirty: AtomicBool,
    error: Mutex<Option<String>>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Syncer {
    fn start(file: Arc<File>) -> Syncer {
        let shared = Arc::new(SyncShared {
            file: Mutex::new(file),
            dirty: AtomicBool::new(false),
            error: Mutex::new(None),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("leased-fsync".into())
            .spawn(move || worker.run())
            .expect("spawn the fsync thread");
        Syncer {
            shared,
            thread: Some(thread),
        }
    }

    fn mark_dirty(&self) {
        self.shared.dirty.store(true, Ordering::Release);
    }

    fn error(&self) -> Option<String> {
        lock(&self.shared.error).clone()
    }

    /// Syncs `file` from now on; returns the one it synced before.
    fn switch(&self, file: Arc<File>) -> Arc<File> {
        std::mem::replace(&mut *lock(&self.shared.file), file)
    }

    fn stop(mut self) {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl SyncShared {
    fn run(&self) {
        let mut stop = lock(&self.stop);
        while !*stop {
            stop = self
                .wake
                .wait_timeout(stop, Duration::from_secs(1))
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
            if self.dirty.swap(false, Ordering::AcqRel) {
                let file = lock(&self.file).clone();
                match file.sync_data() {
                    Ok(()) => *lock(&self.error) = None,
                    Err(error) => {
                        tracing::error!("Fsync of the append-only log failed: {error}");
                        *lock(&self.error) = Some(error.to_string());
                        self.dirty.store(true, Ordering::Release);
                    }
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(dir: &Path) -> LogOptions {
        LogOptions {
            dir: dir.to_path_buf(),
            file_name: "test.aof".into(),
            policy: FsyncPolicy::Always,
            rewrite_percentage: 100,
            rewrite_min_size: 0,
            load_good_prefix: false,
        }
    }

    /// Opens the log in `dir` and replays it into a fresh registry.
    fn reopen(dir: &Path) -> (Log, Registry) {
        let mut registry = Registry::new(10.0, 0, u64::MAX);
        let (log, _) = Log::open(options(dir), |change| registry.apply(change)).unwrap();
        registry.set_recording(true);
        (log, registry)
    }

    fn commit_changes(log: &mut Log, registry: &mut Registry) {
        for change in registry.take_changes() {
            log.append(&change);
        }
        block_on(log.commit()).unwrap();
    }

    /// Runs a future of the log to completion: with `always` its fsync
    /// needs a runtime's blocking pool.
    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    /// Every lease, for comparing two registries.
    fn leases(registry: &mut Registry, runs: usize) -> Vec<Option<(Vec<u8>, u64, f64)>> {
        (0..runs)
            .map(|i| {
                registry
                    .get(format!("run-{i}").as_bytes(), f64::NEG_INFINITY)
                    .map(|(lease, _)| (lease.lease_id(), lease.fencing_token, lease.expires_at))
            })
            .collect()
    }

    #[test]
    fn committed_changes_come_back_after_reopening() {
        let temp = tempfile::tempdir().unwrap();
        let (mut log, mut registry) = reopen(temp.path());
        for i in 0..10 {
            let run = format!("run-{i}");
            registry
                .acquire(run.as_bytes(), b"w", i as f64, None)
                .unwrap();
        }
        registry.heartbeat(b"run-3:w:4", 4, 10.0);
        registry.release(b"run-5:w:6", 6);
        commit_changes(&mut log, &mut registry);
        block_on(log.close()).unwrap();
        let (_, mut again) = reopen(temp.path());
        assert_eq!(leases(&mut again, 10), leases(&mut registry, 10));
        assert_eq!(again.last_token(), 10);
    }

    #[test]
    fn a_rewrite_while_changes_go_on_keeps_every_change_and_shrinks_the_log() {
        let temp = tempfile::tempdir().unwrap();
        let (mut log, mut registry) = reopen(temp.path());
        let runs = 3 * REWRITE_CHUNK + 17;
        for i in 0..runs {
            let run = format!("run-{i}");
            registry
                .acquire(run.as_bytes(), b"w", 0.0, Some(1e6))
                .unwrap();
        }
        for round in 1..=5 {
            for token in 1..=runs as u64 {
                let id = format!("run-{}:w:{token}", token - 1);
                registry.heartbeat(id.as_bytes(), token, f64::from(round));
            }
        }
        commit_changes(&mut log, &mut registry);
        let before = log.status().size;
        log.start_rewrite(&registry).unwrap();
        let mut step = 0;
        loop {
            // Changes between the steps: releases, takeovers, new runs.
            let token = (step * 7 % runs) as u64 + 1;
            let id = format!("run-{}:w:{token}", token - 1);
            registry.release(id.as_bytes(), token);
            let run = format!("run-{}", step * 3 % runs);
            registry
                .acquire(run.as_bytes(), b"late", 2e6, None)
                .unwrap();
            commit_changes(&mut log, &mut registry);
            step += 1;
            match log.step_rewrite(&registry) {
                RewriteStep::Idle => break,
                RewriteStep::Waiting => std::thread::sleep(Duration::from_millis(1)),
                RewriteStep::Progress => {}
            }
        }
        let status = log.status();
        assert_eq!((status.rewrites, status.last_rewrite_ok), (1, true));
        assert!(status.size < before, "{} >= {before}", status.size);
        assert!(!rewrite_path(log.path()).exists());
        // Changes after the rewrite land in the new file.
        registry.acquire(b"run-after", b"w", 3e6, None).unwrap();
        commit_changes(&mut log, &mut registry);
        block_on(log.close()).unwrap();
        let (_, mut again) = reopen(temp.path());
        assert_eq!(leases(&mut again, runs), leases(&mut registry, runs));
        assert!(again.get(b"run-after", 0.0).is_some());
        assert_eq!(again.last_token(), registry.last_token());
        assert_eq!(again.len(), registry.len());
    }

    #[test]
    fn a_torn_tail_is_cut_and_corruption_stops_the_open() {
        let temp = tempfile::tempdir().unwrap();
        let (mut log, mut registry) = reopen(temp.path());
        for i in 0..3 {
            let run = format!("run-{i}");
            registry.acquire(run.as_bytes(), b"w", 0.0, None).unwrap();
            commit_changes(&mut log, &mut registry);
        }
        let path = log.path().to_path_buf();
        block_on(log.close()).unwrap();
        let whole = fs::read(&path).unwrap();

        fs::write(&path, &whole[..whole.len() - 3]).unwrap();
        let mut registry = Registry::new(10.0, 0, u64::MAX);
        let (_, recovery) = Log::open(options(temp.path()), |c| registry.apply(c)).unwrap();
        assert!(recovery.torn_at.is_some());
        assert_eq!(registry.len(), 2);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            recovery.torn_at.unwrap()
        );

        let mut damaged = whole.clone();
        damaged[HEADER.len() + 12] ^= 0x40;
        fs::write(&path, &damaged).unwrap();
        let error = Log::open(options(temp.path()), |_| {}).err().unwrap();
        assert!(
            error.contains(&format!("byte offset {}", HEADER.len())),
            "{error}"
        );
        assert!(error.contains("aof-load-good-prefix"), "{error}");

        let mut good_prefix = options(temp.path());
        good_prefix.load_good_prefix = true;
        let (_, recovery) = Log::open(good_prefix, |_| {}).unwrap();
        let (offset, copy) = recovery.corrupt_cut.unwrap();
        assert_eq!(offset, HEADER.len() as u64);
        assert_eq!(fs::read(copy).unwrap(), damaged);
        assert_eq!(fs::metadata(&path).unwrap().len(), offset);
    }
}
