//! The small value types of the configuration: each knows its names as the
//! file, the command line and `CONFIG GET` spell them.
//!
//! `FsyncPolicy` lives here rather than with the log that obeys it, so the
//! configuration stays a leaf module that depends on nothing of the server.

/// Redis's log levels, mapped onto `tracing` levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Verbose,
    Notice,
    Warning,
    Nothing,
}

impl LogLevel {
    const ALL: [LogLevel; 5] = [
        LogLevel::Debug,
        LogLevel::Verbose,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Nothing,
    ];

    /// The name used in the file, on the command line and by `CONFIG GET`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Verbose => "verbose",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Nothing => "nothing",
        }
    }

    /// Case-insensitive, as Redis reads its enum directives.
    pub(super) fn from_name(name: &str) -> Option<LogLevel> {
        LogLevel::ALL
            .into_iter()
            .find(|level| level.as_str().eq_ignore_ascii_case(name))
    }
}

/// `logformat`: how each log line is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable: time, level, message.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// `tls-auth-clients`: whether a TLS client must present a certificate
/// signed by one of `tls-ca-cert-file`'s CAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsAuthClients {
    /// A client without a valid certificate is refused.
    Yes,
    /// A certificate is asked for; one that is presented must be valid.
    Optional,
    /// No certificate is asked for.
    No,
}

impl TlsAuthClients {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsAuthClients::Yes => "yes",
            TlsAuthClients::Optional => "optional",
            TlsAuthClients::No => "no",
        }
    }
}

/// When the append-only log is fsynced (`appendfsync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Before the replies of every round of commands: nothing acknowledged
    /// is ever lost.
    Always,
    /// Once a second, by a thread of its own rather than the core task.
    EverySec,
    /// When the operating system decides.
    No,
}

impl FsyncPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FsyncPolicy::Always => "always",
            FsyncPolicy::EverySec => "everysec",
            FsyncPolicy::No => "no",
        }
    }

    pub fn from_name(name: &str) -> Option<FsyncPolicy> {
        [FsyncPolicy::Always, FsyncPolicy::EverySec, FsyncPolicy::No]
            .into_iter()
            .find(|policy| policy.as_str().eq_ignore_ascii_case(name))
    }
}

/// One class of `client-output-buffer-limit <class> <hard> <soft>
/// <soft-seconds>`: a client whose unsent replies pass `hard` bytes, or
/// stay above `soft` bytes for `soft_seconds`, is disconnected. 0 turns a
/// limit off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

/// `client-output-buffer-limit`: the limit of each class of client, as in
/// Redis. Redis's `replica` (`slave`) class is accepted and checked but
/// kept nowhere: leased has no replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimits {
    /// Every client not in another class.
    pub normal: OutputLimit,
    /// Clients subscribed to pub/sub channels.
    pub pubsub: OutputLimit,
}

/// `cluster-redirect`: what a follower does with a client's write, which
/// only the leader can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterRedirect {
    /// Sends it to the leader and relays the answer: any client works.
    Proxy,
    /// Answers `-MOVED <slot> <host>:<port>` (the leader's client
    /// address), for cluster-aware clients to go there themselves.
    Moved,
}

impl ClusterRedirect {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterRedirect::Proxy => "proxy",
            ClusterRedirect::Moved => "moved",
        }
    }

    pub(super) fn from_name(name: &str) -> Option<ClusterRedirect> {
        [ClusterRedirect::Proxy, ClusterRedirect::Moved]
            .into_iter()
            .find(|redirect| redirect.as_str().eq_ignore_ascii_case(name))
    }
}
