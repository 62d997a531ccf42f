//! How much hull says on stderr besides errors and the program's own output: `-q` (errors
//! only), the default (warnings, published ports, progress), `-v`/`--verbose` (also what each
//! box was set up with and how it ended), `-vv` (also the one-shot path's step trace, as
//! `HULL_TRACE_STEPS=1`). `HULL_LOG` (`error`, `warn`, `info`, `debug`) sets the same levels
//! where flags cannot be passed (an SDK's `hull serve`, a keeper); a flag wins over it.

use std::fmt::Display;
use std::sync::atomic::{AtomicU8, Ordering};

/// One level of what is said; each says what the ones below it say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

/// The level in force; `UNSET` until [`init`] or the first question reads `HULL_LOG`.
static LEVEL: AtomicU8 = AtomicU8::new(UNSET);
const UNSET: u8 = u8::MAX;

/// The flags every command takes (global: `hull pull -q`, `hull run --verbose`).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct Verbosity {
    /// Print errors only: no warnings, progress or notices (HULL_LOG=error).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Say more: how each box was set up and ended; twice, also the step trace of a one-shot
    /// run (HULL_LOG=info, debug). `-v` before the subcommand is the same (`run -v` is --volume).
    #[arg(long, action = clap::ArgAction::Count, global = true, conflicts_with = "quiet")]
    pub verbose: u8,
}

impl Level {
    fn from_u8(n: u8) -> Level {
        match n {
            0 => Level::Error,
            1 => Level::Warn,
            2 => Level::Info,
            _ => Level::Debug,
        }
    }

    /// `HULL_LOG`'s spelling of a level.
    pub fn parse(s: &str) -> Result<Level, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" | "quiet" => Ok(Level::Error),
            "warn" | "warning" | "" => Ok(Level::Warn),
            "info" | "verbose" => Ok(Level::Info),
            "debug" | "trace" => Ok(Level::Debug),
            other => Err(format!(
                "HULL_LOG={other}: not a level; give error, warn (the default), info or debug"
            )),
        }
    }
}

/// `HULL_LOG`'s level (warn when unset).
fn from_env() -> Result<Level, String> {
    match std::env::var("HULL_LOG") {
        Ok(v) => Level::parse(&v),
        Err(std::env::VarError::NotPresent) => Ok(Level::Warn),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err("HULL_LOG: not UTF-8; give error, warn, info or debug".into())
        }
    }
}

/// Sets the level from the flags (`extra_v`: `-v`s given before the subcommand), else from
/// `HULL_LOG`. `Err` names what was wrong (a bad `HULL_LOG`, which a flag does not excuse).
pub fn init(flags: &Verbosity, extra_v: u8) -> Result<Level, String> {
    let env = from_env()?;
    let v = flags.verbose.saturating_add(extra_v);
    let level = if flags.quiet {
        Level::Error
    } else if v > 0 {
        Level::from_u8(1 + v.min(2))
    } else {
        env
    };
    LEVEL.store(level as u8, Ordering::Relaxed);
    if level >= Level::Debug {
        hull_box::trace::turn_on();
    }
    Ok(level)
}

/// The level in force (`HULL_LOG`'s, or warn, when [`init`] was not called or failed).
pub fn level() -> Level {
    match LEVEL.load(Ordering::Relaxed) {
        UNSET => {
            let l = from_env().unwrap_or(Level::Warn);
            LEVEL.store(l as u8, Ordering::Relaxed);
            l
        }
        n => Level::from_u8(n),
    }
}

/// Whether messages of `l` are printed.
pub fn enabled(l: Level) -> bool {
    level() >= l
}

/// `PREFIX: warning: MSG` unless quiet.
pub fn warn(prefix: &str, msg: impl Display) {
    if enabled(Level::Warn) {
        eprintln!("{prefix}: warning: {msg}");
    }
}

/// `PREFIX: MSG` unless quiet: a notice the user needs by default (a published port).
pub fn notice(prefix: &str, msg: impl Display) {
    if enabled(Level::Warn) {
        eprintln!("{prefix}: {msg}");
    }
}

/// `PREFIX: MSG` with `-v` or more.
pub fn info(prefix: &str, msg: impl Display) {
    if enabled(Level::Info) {
        eprintln!("{prefix}: {msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_a_bad_one_names_the_variable_and_the_choices() {
        assert_eq!(Level::parse("DEBUG"), Ok(Level::Debug));
        assert_eq!(Level::parse("error"), Ok(Level::Error));
        assert_eq!(Level::parse(""), Ok(Level::Warn));
        let e = Level::parse("loud").unwrap_err();
        assert!(e.starts_with("HULL_LOG=loud") && e.contains("info"), "{e}");
        assert!(Level::Info > Level::Warn && Level::Warn > Level::Error);
    }
}
