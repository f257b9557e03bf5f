//! Where a configuration comes from: the redis.conf-style file, then the
//! `--directive value` command line over it; and `CONFIG GET`, which reads
//! it back through the same table.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgMatches, Command};

use super::directives::{DIRECTIVES, READ_ONLY, check_together, lookup, utf8_args};
use super::{Config, ConfigError, DirectiveError};
use crate::glob;
use crate::splitargs::split_args;

/// The clap id of the positional file argument.
const CONFIG_FILE: &str = "config_file";

/// The command line: `leased [CONFIG_FILE] [--directive value ...]`.
pub(super) fn command() -> Command {
    let file = Arg::new(CONFIG_FILE)
        .value_name("CONFIG_FILE")
        .value_parser(clap::value_parser!(PathBuf))
        .help("A redis.conf-style file, read before the --directive options");
    let command = Command::new("leased")
        .version(env!("CARGO_PKG_VERSION"))
        .about(env!("CARGO_PKG_DESCRIPTION"))
        // The file comes first, or `--bind a b FILE` would take FILE for an
        // address.
        .override_usage("leased [CONFIG_FILE] [--DIRECTIVE VALUE ...]")
        // The last `--port` wins, as with redis-server.
        .args_override_self(true)
        .arg(file);
    DIRECTIVES
        .iter()
        .fold(command, |command, directive| command.arg(directive.arg()))
}

impl Config {
    /// Builds the configuration from `leased [CONFIG_FILE] [--directive value ...]`
    /// (the first item is the program name).
    pub fn from_args<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let matches = command()
            .try_get_matches_from(args)
            .map_err(ConfigError::Args)?;
        let mut config = Config::default();
        if let Some(path) = matches.get_one::<PathBuf>(CONFIG_FILE) {
            config.load_file(path)?;
            config.config_file = Some(path.clone());
        }
        config.apply_matches(&matches)?;
        // Lines and options are applied one by one, so a rule between two
        // directives holds only once all are read.
        check_together(&config).map_err(|(_, error)| ConfigError::Conflict { error })?;
        Ok(config)
    }

    /// `CONFIG GET`: every directive whose name matches `pattern`, with its
    /// value as Redis prints it, in table order.
    pub fn get(&self, pattern: &[u8]) -> Vec<(&'static str, String)> {
        let wanted = |name: &str| glob::matches(pattern, name.as_bytes(), true);
        let settable = DIRECTIVES
            .iter()
            .filter(|d| wanted(d.name))
            .map(|d| (d.name, (d.show)(self)));
        let fixed = READ_ONLY
            .iter()
            .filter(|(name, _)| wanted(name))
            .map(|&(name, value)| (name, value.to_owned()));
        settable.chain(fixed).collect()
    }

    fn load_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let text = std::fs::read(path).map_err(|error| ConfigError::File {
            path: path.to_owned(),
            error,
        })?;
        self.apply_text(&path.display().to_string(), &text)
    }

    /// Applies redis.conf text; `source` names it in error messages.
    pub(super) fn apply_text(&mut self, source: &str, text: &[u8]) -> Result<(), ConfigError> {
        for (index, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.trim_ascii();
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            self.apply_line(line).map_err(|error| ConfigError::Line {
                source: source.to_owned(),
                line_no: index + 1,
                line: String::from_utf8_lossy(line).into_owned(),
                error,
            })?;
        }
        Ok(())
    }

    fn apply_line(&mut self, line: &[u8]) -> Result<(), DirectiveError> {
        let args = split_args(line).ok_or(DirectiveError::UnbalancedQuotes)?;
        let args = utf8_args(args)?;
        let Some((name, rest)) = args.split_first() else {
            return Ok(());
        };
        let directive =
            lookup(name).ok_or_else(|| DirectiveError::Unknown { name: name.clone() })?;
        directive.apply(self, rest)
    }

    fn apply_matches(&mut self, matches: &ArgMatches) -> Result<(), ConfigError> {
        for directive in DIRECTIVES {
            let Some(values) = matches.get_many::<String>(directive.name) else {
                continue;
            };
            let values: Vec<String> = values.cloned().collect();
            directive
                .apply(self, &values)
                .map_err(|error| ConfigError::CommandLine {
                    name: directive.name,
                    value: values.join(" "),
                    error,
                })?;
        }
        Ok(())
    }
}
