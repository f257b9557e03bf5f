//! The `everysec` fsync thread: once a second, if anything was written
//! since, it fsyncs the log, so the core task never waits on the disk.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::WriteError;

pub(super) struct Syncer {
    shared: Arc<SyncShared>,
    thread: Option<JoinHandle<()>>,
}

struct SyncShared {
    file: Mutex<Arc<File>>,
    dirty: AtomicBool,
    error: Mutex<Option<WriteError>>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Syncer {
    pub(super) fn start(file: Arc<File>) -> Syncer {
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

    pub(super) fn mark_dirty(&self) {
        self.shared.dirty.store(true, Ordering::Release);
    }

    pub(super) fn error(&self) -> Option<WriteError> {
        lock(&self.shared.error).clone()
    }

    /// Syncs `file` from now on; returns the one it synced before.
    pub(super) fn switch(&self, file: Arc<File>) -> Arc<File> {
        std::mem::replace(&mut *lock(&self.shared.file), file)
    }

    pub(super) fn stop(mut self) {
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
                        *lock(&self.error) = Some(WriteError::new(&error));
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
