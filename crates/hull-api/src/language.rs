//! The languages `--code`, `run`'s `code` and `run_code` take, and the interpreter each one runs.

use std::fmt;
use std::str::FromStr;

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};

/// An interpreter for code given as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Language {
    #[default]
    Python,
    Bash,
    Sh,
    Node,
}

/// Why a language name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: use python, bash, sh or node")]
pub struct UnknownLanguage(pub String);

impl Language {
    /// Every language, in the order front ends list them.
    pub const ALL: [Language; 4] = [
        Language::Python,
        Language::Bash,
        Language::Sh,
        Language::Node,
    ];

    /// The name callers write.
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Bash => "bash",
            Language::Sh => "sh",
            Language::Node => "node",
        }
    }

    /// The program the image must have.
    pub fn interpreter(self) -> &'static str {
        match self {
            Language::Python => "python3",
            Language::Bash => "bash",
            Language::Sh => "sh",
            Language::Node => "node",
        }
    }

    /// The command line that runs `code` with this language's interpreter.
    pub fn argv(self, code: &str) -> Vec<String> {
        let flag = if self == Language::Node { "-e" } else { "-c" };
        vec![self.interpreter().into(), flag.into(), code.into()]
    }
}

impl FromStr for Language {
    type Err = UnknownLanguage;

    /// The names, plus `python3` and `javascript` (the interpreter's and the language's).
    fn from_str(s: &str) -> Result<Language, UnknownLanguage> {
        match s {
            "python" | "python3" => Ok(Language::Python),
            "bash" => Ok(Language::Bash),
            "sh" => Ok(Language::Sh),
            "node" | "javascript" => Ok(Language::Node),
            other => Err(UnknownLanguage(other.to_string())),
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Language {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Language, D::Error> {
        let s = String::deserialize(d)
            .map_err(|_| D::Error::custom("expected a string: python, bash, sh or node"))?;
        s.parse().map_err(D::Error::custom)
    }
}

impl Serialize for Language {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_aliases_parse() {
        for l in Language::ALL {
            assert_eq!(l.name().parse::<Language>(), Ok(l));
        }
        assert_eq!("python3".parse::<Language>(), Ok(Language::Python));
        assert_eq!("javascript".parse::<Language>(), Ok(Language::Node));
        let e = "cobol".parse::<Language>().unwrap_err().to_string();
        assert!(
            e.contains("cobol") && e.contains("python, bash, sh or node"),
            "{e}"
        );
        assert_eq!(Language::Node.argv("1"), ["node", "-e", "1"]);
        assert_eq!(Language::Python.argv("1"), ["python3", "-c", "1"]);
    }
}
