//! Parser for the policy file format (`policy/default.policy`).
//!
//! Shared by `build.rs` (which turns the rules into a Rust table) and by the crate's unit tests
//! (which check the rejection paths). It uses only `std` because build scripts of this crate
//! have no dependencies. The integration test `tests/policy_matches_file.rs` deliberately has
//! its own, independent parser.

use std::fmt;

/// Target architectures a rule may be qualified with.
pub(crate) const ARCHES: [&str; 2] = ["x86_64", "aarch64"];

/// One parsed rule, still as text: names are resolved by the Rust compiler later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileRule {
    /// 1-based line number in the policy file.
    pub line: usize,
    pub name: String,
    /// `None` applies to every architecture.
    pub arch: Option<String>,
    pub action: FileAction,
    pub reason: String,
}

/// The action column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileAction {
    Allow,
    /// The errno's libc name, e.g. `EPERM`.
    Errno(String),
    Kill,
    CloneNoNamespaces,
    IoctlNoTiocsti,
    SocketFamilies,
    ModeNoSetId,
    OpenNoSetId,
}

impl FileAction {
    /// For an argument-checking action: its spelling and the syscalls it may be given to
    /// (their arguments are where the check looks); `None` for the others.
    fn argument_check(&self) -> Option<(&'static str, &'static [&'static str])> {
        match self {
            Self::CloneNoNamespaces => Some(("clone-no-ns", &["clone"])),
            Self::IoctlNoTiocsti => Some(("ioctl-no-tiocsti", &["ioctl"])),
            Self::SocketFamilies => Some(("socket-families", &["socket", "socketpair"])),
            Self::ModeNoSetId => Some((
                "mode-no-setid",
                &[
                    "chmod",
                    "fchmod",
                    "fchmodat",
                    "fchmodat2",
                    "creat",
                    "mknod",
                    "mknodat",
                ],
            )),
            Self::OpenNoSetId => Some(("open-no-setid", &["open", "openat"])),
            Self::Allow | Self::Errno(_) | Self::Kill => None,
        }
    }
}

/// Why a line was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.line, self.message)
    }
}

impl FileRule {
    /// Whether this rule is emitted for `arch` (a `CARGO_CFG_TARGET_ARCH` value).
    pub(crate) fn applies_to(&self, arch: &str) -> bool {
        match self.arch.as_deref() {
            None => true,
            Some(a) => a == arch,
        }
    }
}

/// Splits off the first whitespace-separated token; returns it and the rest of the line.
fn next_token(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

fn is_syscall_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn is_errno_name(s: &str) -> bool {
    s.len() >= 2
        && s.starts_with('E')
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

fn parse_action(token: &str) -> Result<FileAction, String> {
    match token {
        "allow" => Ok(FileAction::Allow),
        "kill" => Ok(FileAction::Kill),
        "clone-no-ns" => Ok(FileAction::CloneNoNamespaces),
        "ioctl-no-tiocsti" => Ok(FileAction::IoctlNoTiocsti),
        "socket-families" => Ok(FileAction::SocketFamilies),
        "mode-no-setid" => Ok(FileAction::ModeNoSetId),
        "open-no-setid" => Ok(FileAction::OpenNoSetId),
        _ => match token.strip_prefix("errno:") {
            Some(name) if is_errno_name(name) => Ok(FileAction::Errno(name.to_owned())),
            Some(name) => Err(format!("`{name}` is not an errno name like EPERM")),
            None => Err(format!(
                "unknown action `{token}` (expected allow, kill, errno:NAME, clone-no-ns, \
                 ioctl-no-tiocsti, socket-families, mode-no-setid, open-no-setid)"
            )),
        },
    }
}

fn parse_line(line_no: usize, text: &str) -> Result<Option<FileRule>, String> {
    let text = text.split('#').next().unwrap_or("");
    let Some((name, rest)) = next_token(text) else {
        return Ok(None);
    };
    if !is_syscall_name(name) {
        return Err(format!("`{name}` is not a syscall name"));
    }
    let (mut token, mut rest) = next_token(rest).ok_or("missing action and reason")?;
    let mut arch = None;
    if let Some(inner) = token.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or("unterminated arch qualifier")?;
        if !ARCHES.contains(&inner) {
            return Err(format!(
                "unknown arch `{inner}` (expected one of {ARCHES:?})"
            ));
        }
        arch = Some(inner.to_owned());
        (token, rest) = next_token(rest).ok_or("missing action and reason")?;
    }
    let action = parse_action(token)?;
    if let Some((spelling, syscalls)) = action.argument_check() {
        if !syscalls.contains(&name) {
            return Err(format!(
                "{spelling} applies only to {}",
                syscalls.join(", ")
            ));
        }
    }
    let reason = rest.trim();
    if reason.is_empty() {
        return Err(format!("rule for `{name}` has no reason"));
    }
    Ok(Some(FileRule {
        line: line_no,
        name: name.to_owned(),
        arch,
        action,
        reason: reason.to_owned(),
    }))
}

/// Parses a whole policy file and rejects duplicates for any supported architecture.
pub(crate) fn parse(text: &str) -> Result<Vec<FileRule>, ParseError> {
    let mut rules: Vec<FileRule> = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        let line_no = idx + 1;
        let rule = parse_line(line_no, line).map_err(|message| ParseError {
            line: line_no,
            message,
        })?;
        let Some(rule) = rule else { continue };
        for arch in ARCHES {
            if !rule.applies_to(arch) {
                continue;
            }
            if let Some(prev) = rules
                .iter()
                .find(|r| r.name == rule.name && r.applies_to(arch))
            {
                return Err(ParseError {
                    line: line_no,
                    message: format!(
                        "duplicate rule for `{}` on {arch} (first at line {})",
                        rule.name, prev.line
                    ),
                });
            }
        }
        rules.push(rule);
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ParseError {
        parse(text).expect_err("policy text should be rejected")
    }

    #[test]
    fn parses_all_columns() {
        let rules = parse(
            "# header\n\nread allow read things  # trailing\nopen [x86_64] errno:EPERM no  way\n",
        )
        .unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].line, 3);
        assert_eq!(rules[0].action, FileAction::Allow);
        assert_eq!(rules[0].reason, "read things");
        assert_eq!(rules[1].arch.as_deref(), Some("x86_64"));
        assert_eq!(rules[1].action, FileAction::Errno("EPERM".into()));
        assert_eq!(rules[1].reason, "no  way");
        assert!(rules[1].applies_to("x86_64"));
        assert!(!rules[1].applies_to("aarch64"));
    }

    #[test]
    fn argument_checks_parse_for_their_syscalls() {
        let rules = parse(
            "socketpair socket-families a\nmknodat mode-no-setid b\nopen [x86_64] open-no-setid c\n",
        )
        .unwrap();
        let actions: Vec<&FileAction> = rules.iter().map(|r| &r.action).collect();
        assert_eq!(
            actions,
            [
                &FileAction::SocketFamilies,
                &FileAction::ModeNoSetId,
                &FileAction::OpenNoSetId
            ]
        );
    }

    #[test]
    fn rejects_missing_reason() {
        let e = err("read allow\n");
        assert_eq!(e.line, 1);
        assert!(e.message.contains("no reason"), "{e}");
        assert!(err("read allow   # comment is not a reason\n")
            .message
            .contains("no reason"));
        assert!(err("read\n").message.contains("missing action"));
        assert!(err("read [x86_64]\n").message.contains("missing action"));
    }

    #[test]
    fn rejects_unknown_action() {
        let e = err("\nread permit because\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("unknown action"), "{e}");
        assert!(err("read errno:eperm why\n").message.contains("errno name"));
        assert!(err("read errno: why\n").message.contains("errno name"));
        assert!(err("ptrace clone-no-ns why\n")
            .message
            .contains("only to clone"));
        assert!(err("read ioctl-no-tiocsti why\n")
            .message
            .contains("only to ioctl"));
        assert!(err("connect socket-families why\n")
            .message
            .contains("only to socket, socketpair"));
        assert!(err("openat mode-no-setid why\n")
            .message
            .contains("only to chmod, fchmod"));
        assert!(err("chmod open-no-setid why\n")
            .message
            .contains("only to open, openat"));
    }

    #[test]
    fn rejects_duplicates_per_arch() {
        let e = err("read allow a\nwrite allow b\nread kill c\n");
        assert_eq!(e.line, 3);
        assert!(
            e.message.contains("duplicate") && e.message.contains("line 1"),
            "{e}"
        );
        assert_eq!(err("open [x86_64] allow a\nopen allow b\n").line, 2);
        assert_eq!(err("open allow a\nopen [aarch64] allow b\n").line, 2);
        assert_eq!(err("open [x86_64] allow a\nopen [x86_64] kill b\n").line, 2);
        // One rule per arch is fine.
        assert_eq!(
            parse("open [x86_64] allow a\nopen [aarch64] kill b\n")
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn rejects_bad_names_and_arches() {
        assert!(err("Read allow a\n").message.contains("not a syscall name"));
        assert!(err("read [riscv64] allow a\n")
            .message
            .contains("unknown arch"));
        assert!(err("read [x86_64 allow a\n")
            .message
            .contains("unterminated"));
    }

    #[test]
    fn error_display_has_line() {
        assert_eq!(
            err("\n\nread\n").to_string(),
            "3: missing action and reason"
        );
    }
}
