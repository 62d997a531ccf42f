//! Errors of the request model, and how every front end shows an error with its causes.
//!
//! The rule (Cloud Hypervisor's): an error's message never repeats its `source()`'s text, so a
//! chain reads once from the top (`open /x`, then `No such file or directory`). Front ends show
//! the whole chain: [`Chain`] joins it on one line, [`chain`] lists it (`hull serve`'s `chain`).

use std::error::Error;
use std::fmt;

/// A request argument refused as written: `arg` is the caller's name for it (the JSON key, or
/// `params` for the request as a whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{arg}: {why}")]
pub struct RequestError {
    pub arg: String,
    pub why: String,
}

impl RequestError {
    pub fn new(arg: impl Into<String>, why: impl fmt::Display) -> RequestError {
        RequestError {
            arg: arg.into(),
            why: why.to_string(),
        }
    }
}

/// An error and its causes on one line, `top: cause: cause`.
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut src = self.0.source();
        while let Some(s) = src {
            write!(f, ": {s}")?;
            src = s.source();
        }
        Ok(())
    }
}

/// An error and its causes, top first.
pub fn chain(err: &(dyn Error + 'static)) -> Vec<String> {
    let mut v = vec![err.to_string()];
    let mut src = err.source();
    while let Some(s) = src {
        v.push(s.to_string());
        src = s.source();
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("open /x")]
    struct Top(#[source] std::io::Error);

    #[test]
    fn a_chain_reads_once_from_the_top() {
        let e = Top(std::io::Error::from_raw_os_error(2));
        assert_eq!(
            Chain(&e).to_string(),
            "open /x: No such file or directory (os error 2)"
        );
        assert_eq!(chain(&e).len(), 2);
    }
}
