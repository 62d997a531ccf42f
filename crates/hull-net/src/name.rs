//! Host names as the policy compares them: normalised once (ASCII lowercase, no trailing dot,
//! DNS length and label rules), so `API.Example.com.` and `api.example.com` are one name and a
//! name that no resolver would accept never matches anything.

use std::fmt;

/// Why a name or a host pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("an empty name")]
    Empty,
    #[error("{len} bytes long (at most 253)")]
    TooLong { len: usize },
    #[error("an empty label (two dots in a row, or a leading dot)")]
    EmptyLabel,
    #[error("the label `{label}` is {len} bytes long (at most 63)")]
    LabelTooLong { label: String, len: usize },
    #[error("the label `{label}` holds `{ch}` (letters, digits, `-` and `_` only)")]
    BadChar { label: String, ch: char },
    #[error("the label `{label}` starts or ends with `-`")]
    Hyphen { label: String },
    #[error("`*` only as a whole first label (`*.example.com`)")]
    BadWildcard,
}

/// A normalised host name (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    /// Normalises `raw` as a DNS query name: ASCII letters lowercased, one trailing dot dropped.
    /// Non-ASCII names must come in their `xn--` form, as they do on the wire.
    pub fn parse(raw: &str) -> Result<Name, NameError> {
        let s = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
        if s.is_empty() {
            return Err(NameError::Empty);
        }
        if s.len() > 253 {
            return Err(NameError::TooLong { len: s.len() });
        }
        for label in s.split('.') {
            check_label(label)?;
        }
        Ok(Name(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when `self` lies strictly below `parent` on a label boundary (`a.b.c` below `b.c`,
    /// `xb.c` not below `b.c`, `b.c` not below itself).
    pub fn is_below(&self, parent: &Name) -> bool {
        self.0.len() > parent.0.len()
            && self.0.ends_with(parent.0.as_str())
            && self.0.as_bytes()[self.0.len() - parent.0.len() - 1] == b'.'
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn check_label(label: &str) -> Result<(), NameError> {
    if label.is_empty() {
        return Err(NameError::EmptyLabel);
    }
    if label.len() > 63 {
        return Err(NameError::LabelTooLong {
            label: label.to_string(),
            len: label.len(),
        });
    }
    if let Some(ch) = label
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(NameError::BadChar {
            label: label.to_string(),
            ch,
        });
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err(NameError::Hyphen {
            label: label.to_string(),
        });
    }
    Ok(())
}

/// An allowed-host entry: one exact name, or `*.parent` for every name below `parent` (any
/// depth, never `parent` itself: list it too to allow the apex).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    Exact(Name),
    Below(Name),
}

impl HostPattern {
    pub fn parse(raw: &str) -> Result<HostPattern, NameError> {
        match raw.strip_prefix("*.") {
            Some(rest) => {
                if rest.contains('*') {
                    return Err(NameError::BadWildcard);
                }
                Ok(HostPattern::Below(Name::parse(rest)?))
            }
            None if raw.contains('*') => Err(NameError::BadWildcard),
            None => Ok(HostPattern::Exact(Name::parse(raw)?)),
        }
    }

    pub fn matches(&self, name: &Name) -> bool {
        match self {
            HostPattern::Exact(n) => n == name,
            HostPattern::Below(parent) => name.is_below(parent),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(n) => write!(f, "{n}"),
            HostPattern::Below(n) => write!(f, "*.{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    #[test]
    fn names_are_normalised_and_bad_ones_refused() {
        assert_eq!(n("API.Example.COM."), n("api.example.com"));
        assert_eq!(n("_acme-challenge.x.org").as_str(), "_acme-challenge.x.org");
        assert_eq!(Name::parse(""), Err(NameError::Empty));
        assert_eq!(Name::parse("."), Err(NameError::Empty));
        assert_eq!(Name::parse("a..b"), Err(NameError::EmptyLabel));
        assert_eq!(Name::parse(".a"), Err(NameError::EmptyLabel));
        assert!(matches!(
            Name::parse("a b.c"),
            Err(NameError::BadChar { ch: ' ', .. })
        ));
        assert!(matches!(
            Name::parse("bücher.de"),
            Err(NameError::BadChar { .. })
        ));
        assert!(matches!(Name::parse("-a.b"), Err(NameError::Hyphen { .. })));
        let long_label = "a".repeat(64);
        assert!(matches!(
            Name::parse(&long_label),
            Err(NameError::LabelTooLong { len: 64, .. })
        ));
        let long = vec!["a".repeat(60); 5].join(".");
        assert!(matches!(
            Name::parse(&long),
            Err(NameError::TooLong { len: 304 })
        ));
    }

    #[test]
    fn wildcards_match_every_deeper_name_on_label_boundaries_never_the_apex() {
        let p = HostPattern::parse("*.Example.com").unwrap();
        assert!(p.matches(&n("api.example.com")));
        assert!(p.matches(&n("a.b.example.com.")));
        assert!(!p.matches(&n("example.com")), "apex");
        assert!(!p.matches(&n("evilexample.com")), "not label-aligned");
        assert!(!p.matches(&n("example.com.evil.org")));
        let e = HostPattern::parse("api.example.com").unwrap();
        assert!(e.matches(&n("API.example.com.")));
        assert!(!e.matches(&n("x.api.example.com")));
        assert_eq!(HostPattern::parse("a.*.com"), Err(NameError::BadWildcard));
        assert_eq!(HostPattern::parse("*.*.com"), Err(NameError::BadWildcard));
        assert_eq!(HostPattern::parse("*"), Err(NameError::BadWildcard));
        assert_eq!(p.to_string(), "*.example.com");
    }
}
