//! The process and its machine as the allocator and the kernel report
//! them: memory, CPU time, the kernel's name, the open-files limit. Read
//! by INFO and the metrics endpoint off the core task, never on it.

use std::time::{Duration, SystemTime};

use tracing::warn;

/// jemalloc's view of the heap, in bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocatorStats {
    /// Allocated by the program: Redis's `used_memory`.
    pub allocated: u64,
    /// In pages the allocator is using (allocated plus its fragmentation).
    pub active: u64,
    /// In pages the allocator holds mapped and resident.
    pub resident: u64,
}

/// Memory figures for `INFO memory`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    pub allocator: AllocatorStats,
    /// The most ever allocated at a sample or `INFO`.
    pub peak: u64,
    /// The process's resident set size; 0 where it cannot be read.
    pub rss: u64,
}

/// jemalloc's statistics (the server's allocator, see main.rs). They are
/// cached: advancing the epoch refreshes them.
pub fn allocator_stats() -> AllocatorStats {
    use tikv_jemalloc_ctl::{epoch, stats};
    let _ = epoch::advance();
    let read = |value: tikv_jemalloc_ctl::Result<usize>| value.unwrap_or(0) as u64;
    AllocatorStats {
        allocated: read(stats::allocated::read()),
        active: read(stats::active::read()),
        resident: read(stats::resident::read()),
    }
}

/// jemalloc's version, as `mem_allocator` shows it: `jemalloc-5.3.0`.
pub fn allocator_name() -> String {
    let version = tikv_jemalloc_ctl::version::read().unwrap_or("unknown");
    // "5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c": the release.
    let release = version.split('-').next().unwrap_or(version);
    format!("jemalloc-{release}")
}

/// The process's resident set size, from `/proc/self/statm` where there is
/// one (Linux); 0 elsewhere.
pub fn resident_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .unwrap_or(0);
    pages * page_size()
}

fn page_size() -> u64 {
    use nix::unistd::{SysconfVar, sysconf};
    match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(size)) if size > 0 => size as u64,
        _ => 4096,
    }
}

/// The machine's physical memory in bytes; 0 if unknown.
pub fn total_system_memory() -> u64 {
    use nix::unistd::{SysconfVar, sysconf};
    match sysconf(SysconfVar::_PHYS_PAGES) {
        Ok(Some(pages)) if pages > 0 => (pages as u64).saturating_mul(page_size()),
        _ => 0,
    }
}

/// CPU time used, from getrusage(2).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTimes {
    /// By the process's threads.
    pub user: Duration,
    pub system: Duration,
    /// By its children that have been waited for (leased starts none).
    pub children_user: Duration,
    pub children_system: Duration,
}

pub fn cpu_times() -> CpuTimes {
    use nix::sys::resource::{UsageWho, getrusage};
    use nix::sys::time::TimeVal;
    let duration = |time: TimeVal| {
        let micros = time.tv_sec() as i128 * 1_000_000 + time.tv_usec() as i128;
        Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    };
    let mut times = CpuTimes::default();
    if let Ok(own) = getrusage(UsageWho::RUSAGE_SELF) {
        times.user = duration(own.user_time());
        times.system = duration(own.system_time());
    }
    if let Ok(children) = getrusage(UsageWho::RUSAGE_CHILDREN) {
        times.children_user = duration(children.user_time());
        times.children_system = duration(children.system_time());
    }
    times
}

/// The kernel as `uname -s -r -m` prints it, as Redis's `os` field shows
/// it: `Linux 6.1.0-18-amd64 x86_64`.
pub fn os_name() -> String {
    match nix::sys::utsname::uname() {
        Ok(uts) => format!(
            "{} {} {}",
            uts.sysname().to_string_lossy(),
            uts.release().to_string_lossy(),
            uts.machine().to_string_lossy()
        ),
        Err(_) => format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
    }
}

/// 40 random hex characters, as Redis's `run_id` and `master_replid`.
pub fn random_hex_id() -> String {
    let mut bytes = [0u8; 20];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness: the time and the process id keep the id
        // unlike other processes' ids, which is all it is for.
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            ^ (u128::from(std::process::id()) << 64);
        for (byte, seed_byte) in bytes.iter_mut().zip(seed.to_le_bytes()) {
            *byte = seed_byte;
        }
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Descriptors kept beyond one per client: listeners, the log, the data
/// directory's files, as Redis reserves 32.
const RESERVED_FDS: u64 = 32;

/// Raises the soft open-files limit so that `maxclients` clients fit, as
/// far as the hard limit allows, as Redis does at start-up and when
/// `maxclients` is raised; a default soft limit of 1024 would otherwise
/// refuse connections long before it.
pub fn raise_open_files_limit(maxclients: usize) {
    let wanted = (maxclients as u64).saturating_add(RESERVED_FDS);
    match rlimit::increase_nofile_limit(wanted) {
        Ok(got) if got < wanted => warn!(
            "The open files limit ({got}) is too low for maxclients {maxclients}: at most \
             about {} clients can connect. Raise it with 'ulimit -n' (or LimitNOFILE= in \
             systemd), or lower maxclients.",
            got.saturating_sub(RESERVED_FDS)
        ),
        Ok(_) => {}
        Err(error) => warn!("Cannot read or raise the open files limit: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_forty_hex_characters_and_differ() {
        let (a, b) = (random_hex_id(), random_hex_id());
        assert_eq!(a.len(), 40);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
    }

    #[test]
    fn probes_give_plausible_figures() {
        assert!(allocator_stats().allocated > 0);
        assert!(total_system_memory() > 0);
        assert!(allocator_name().starts_with("jemalloc-"));
        assert!(!os_name().is_empty());
    }
}
