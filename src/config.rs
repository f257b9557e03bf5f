//! Configuration: the directive table, the redis.conf-style file and the
//! `--directive value` overrides, and `CONFIG GET`.
//! (Interface stub: implemented in its own change.)

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// Redis's log levels, mapped onto `tracing` levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Verbose,
    Notice,
    Warning,
    Nothing,
}

/// The server's settings, after the file and the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// TCP port; 0 picks a free one.
    pub port: u16,
    /// Addresses to listen on.
    pub bind: Vec<String>,
    /// Data directory: the token ceiling and the lock live here.
    pub dir: PathBuf,
    /// Default lease TTL in seconds.
    pub lease_ttl: f64,
    pub loglevel: LogLevel,
    /// The configuration file read at start-up, if any.
    pub config_file: Option<PathBuf>,
}

/// Why the configuration could not be loaded.
#[derive(Debug)]
pub enum ConfigError {
    /// From the command-line parser, including `--help` and `--version`,
    /// which `clap::Error::exit` prints and exits with the right code.
    Args(clap::Error),
    /// Anything else: the message names the directive (and file line).
    Invalid(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Args(e) => write!(f, "{e}"),
            ConfigError::Invalid(m) => f.write_str(m),
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        todo!()
    }
}

impl Config {
    /// Builds the configuration from `leased [CONFIG_FILE] [--directive value ...]`
    /// (the first item is the program name).
    pub fn from_args<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let _ = args;
        todo!()
    }

    /// `CONFIG GET`: every directive whose name matches `pattern`, with its
    /// value as Redis prints it, in table order.
    pub fn get(&self, pattern: &[u8]) -> Vec<(&'static str, String)> {
        let _ = pattern;
        todo!()
    }
}
