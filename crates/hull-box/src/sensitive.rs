//! Host paths a box may not bind, or may bind read-only only: the reviewed list in
//! `policy/sensitive-mounts.policy` (compiled in by `build.rs`, one reason per entry), and the
//! matching of a resolved bind source against it under every home directory of the host.
//!
//! Matching is by path only (nothing is read from the paths): a source is refused when it is an
//! entry, lies inside one, or contains one, whether or not the entry exists. A writable bind of
//! a home without `.bashrc` would let the box create one, so existence cannot matter.

use std::path::Path;

/// True when `path` equals `dir` or lies below it (both normalised absolute paths). Lives here,
/// with the matching that needs it most; `spec` hands it on.
pub fn is_within(path: &str, dir: &str) -> bool {
    if dir == "/" {
        return true;
    }
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// What an entry allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Refused in any mode: the path, anything inside it, anything containing it.
    None,
    /// The same, except that a read-only bind is allowed.
    ReadOnly,
    /// The path itself and what contains it are refused; what lies inside may be bound.
    Exact,
}

/// One entry of the list.
#[derive(Debug)]
pub struct Sensitive {
    /// An absolute host path, or `~/REL` for REL under every home directory.
    pub path: &'static str,
    pub access: Access,
    /// What the path holds ("PATH holds REASON").
    pub reason: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/sensitive_mounts.rs"));

/// The home directories `~/` entries apply under, as resolved paths.
///
/// On the host these are the caller's `$HOME`, `/root`, the home of every `/etc/passwd` user
/// with a login shell (and the caller's own), and any directory right below `/home` (or what
/// `/home` resolves to): hull run as root can be handed another user's `~/.ssh`. Users known
/// only to NSS (LDAP...) with homes outside `/home` are not seen.
#[derive(Clone, Debug, Default)]
pub struct Homes {
    dirs: Vec<String>,
    /// Any directory right below one of these is a home too.
    parents: Vec<String>,
}

/// Shells that mean "no login" in `/etc/passwd`: such users (daemons) have homes such as
/// `/usr/sbin` or `/var/www`, which are not where anyone keeps credentials.
const NO_LOGIN_SHELLS: &[&str] = &["nologin", "false", "sync", "shutdown", "halt"];

/// What the cached homes were read from: `$HOME` and `/etc/passwd`'s identity and times.
type HomesKey = (
    Option<std::ffi::OsString>,
    Option<(u64, u64, u64, i64, i64)>,
);

/// The host's homes, read again only when `$HOME` or `/etc/passwd` changes (a box's setup
/// checks its sources twice; reading and resolving every home costs ~8 us here).
static HOST_HOMES: std::sync::Mutex<Option<(HomesKey, Homes)>> = std::sync::Mutex::new(None);

impl Homes {
    /// This host's home directories (see the type's documentation).
    pub fn of_host() -> Homes {
        use std::os::unix::fs::MetadataExt;
        let key: HomesKey = (
            std::env::var_os("HOME"),
            std::fs::metadata("/etc/passwd")
                .ok()
                .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())),
        );
        let mut cache = crate::poison::lock(&HOST_HOMES);
        if let Some((k, h)) = cache.as_ref() {
            if *k == key {
                return h.clone();
            }
        }
        let h = Homes::read(key.0.as_deref());
        *cache = Some((key, h.clone()));
        h
    }

    fn read(home: Option<&std::ffi::OsStr>) -> Homes {
        let mut h = Homes::default();
        if let Some(home) = home {
            h.add(Path::new(home));
        }
        h.add(Path::new("/root"));
        let euid = crate::sys::geteuid().to_string();
        if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
            for line in passwd.lines() {
                let f: Vec<&str> = line.split(':').collect();
                let [_, _, uid, _, _, home, shell] = f[..] else {
                    continue;
                };
                let shell_name = shell.rsplit('/').next().unwrap_or_default();
                if uid == euid || !(shell.is_empty() || NO_LOGIN_SHELLS.contains(&shell_name)) {
                    h.add(Path::new(home));
                }
            }
        }
        for p in [
            Path::new("/home").to_path_buf(),
            std::fs::canonicalize("/home").unwrap_or_default(),
        ] {
            let s = p.to_string_lossy().into_owned();
            if s.starts_with('/') && s != "/" && !h.parents.contains(&s) {
                h.parents.push(s);
            }
        }
        h
    }

    /// Exactly these homes (already resolved), plus any directory right below `/home`.
    pub fn only(dirs: &[&str]) -> Homes {
        Homes {
            dirs: dirs.iter().map(|d| (*d).to_string()).collect(),
            parents: vec!["/home".into()],
        }
    }

    /// Adds `dir` resolved; a home that does not exist holds nothing a source could reach.
    fn add(&mut self, dir: &Path) {
        let Ok(c) = std::fs::canonicalize(dir) else {
            return;
        };
        let c = c.to_string_lossy().into_owned();
        if c != "/" && !self.dirs.contains(&c) {
            self.dirs.push(c);
        }
    }

    /// Every home that matters for `source`: the known ones, and the `/home/NAME` it is in.
    fn for_source<'a>(&'a self, source: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let derived = self.parents.iter().filter_map(move |p| {
            let rest = source.strip_prefix(p.as_str())?.strip_prefix('/')?;
            let name = rest.split('/').next().unwrap_or_default();
            (!name.is_empty()).then(|| &source[..p.len() + 1 + name.len()])
        });
        self.dirs.iter().map(String::as_str).chain(derived)
    }
}

/// How a refused source relates to the sensitive path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// The source is the sensitive path.
    Is,
    /// The source lies inside it.
    Inside,
    /// The source contains it.
    Contains,
}

/// Why a source is refused: the sensitive path (resolved for the home it was found under), how
/// the source relates to it, and the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub path: String,
    pub relation: Relation,
    pub access: Access,
    pub reason: &'static str,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (path, reason) = (&self.path, self.reason);
        match self.relation {
            Relation::Is => write!(f, "{path} holds {reason}"),
            Relation::Inside => write!(f, "it lies inside {path}, which holds {reason}"),
            Relation::Contains => write!(f, "it contains {path}, which holds {reason}"),
        }
    }
}

impl Refusal {
    /// How to get what was wanted without the refused access, for a source given as `field`.
    pub fn fix(&self, field: crate::field::SpecField) -> &'static str {
        match (self.access, field) {
            (Access::ReadOnly, crate::field::SpecField::Workspace) => "the workspace is writable: use a directory made for the box, or mount this one read-only (SRC:DST:ro)",
            (Access::ReadOnly, _) => "bind it read-only (SRC:DST:ro, or read_only in the SDKs)",
            (Access::Exact, _) => "mount a directory made for the box inside it",
            (Access::None, _) => "copy only the files the box needs into a directory of their own and mount that",
        }
    }
}

/// Checks a resolved source against the list. A home directory itself, or a directory that
/// contains one, is refused too (it holds every entry below it). Allocates only to refuse.
pub fn check(source: &str, read_only: bool, homes: &Homes) -> Result<(), HomeOrEntry> {
    if let Some(h) = homes.for_source(source).find(|h| is_within(h, source)) {
        return Err(HomeOrEntry::Home {
            home: h.to_string(),
            is: h == source,
        });
    }
    for e in SENSITIVE {
        let found = match e.path.strip_prefix("~/") {
            // The source lies in a home (no home lies in it: that was refused above), so only
            // its path below that home can meet the entry.
            Some(rel) => homes.for_source(source).find_map(|h| {
                let below = source.strip_prefix(h)?.strip_prefix('/')?;
                relation(below, rel).map(|r| (format!("{h}/{rel}"), r))
            }),
            None => relation(source, e.path).map(|r| (e.path.to_string(), r)),
        };
        let Some((path, relation)) = found else {
            continue;
        };
        let refused = match e.access {
            Access::None => true,
            Access::ReadOnly => !read_only,
            Access::Exact => relation != Relation::Inside,
        };
        if refused {
            return Err(HomeOrEntry::Entry(Refusal {
                path,
                relation,
                access: e.access,
                reason: e.reason,
            }));
        }
    }
    Ok(())
}

/// How `source` relates to `entry` (both absolute, or both relative to one home).
fn relation(source: &str, entry: &str) -> Option<Relation> {
    if source == entry {
        Some(Relation::Is)
    } else if is_within(source, entry) {
        Some(Relation::Inside)
    } else if is_within(entry, source) {
        Some(Relation::Contains)
    } else {
        None
    }
}

/// A refusal by [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HomeOrEntry {
    /// The source is a home directory (`is`) or contains one.
    Home { home: String, is: bool },
    /// The source meets an entry of the list.
    Entry(Refusal),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_has_a_reason_and_a_well_formed_path() {
        assert!(SENSITIVE.len() > 40, "the list was not compiled in");
        for e in SENSITIVE {
            assert!(!e.reason.trim().is_empty(), "{}", e.path);
            assert!(
                e.path.starts_with('/') || e.path.starts_with("~/"),
                "{}",
                e.path
            );
        }
    }

    /// Every entry of the list, as the list says, under a home hull was told about and under an
    /// arbitrary /home/NAME: the entry, a path inside it and its parent directory.
    #[test]
    fn every_entry_is_enforced_as_listed() {
        let homes = Homes::only(&["/srv/home/me"]);
        for e in SENSITIVE {
            let concrete: Vec<String> = match e.path.strip_prefix("~/") {
                Some(rel) => vec![format!("/srv/home/me/{rel}"), format!("/home/alice/{rel}")],
                None => vec![e.path.to_string()],
            };
            for p in concrete {
                let inside = format!("{p}/x/y");
                for (src, ro) in [(&p, false), (&p, true), (&inside, false), (&inside, true)] {
                    let r = check(src, ro, &homes);
                    let want_refused = match e.access {
                        Access::None => true,
                        Access::ReadOnly => !ro,
                        Access::Exact => src == &p,
                    };
                    match (&r, want_refused) {
                        (Err(HomeOrEntry::Entry(x)), true) => {
                            assert_eq!(
                                x.reason, e.reason,
                                "{src} (ro {ro}) refused for another entry: {x}"
                            );
                        }
                        (Ok(()), false) => {}
                        _ => panic!(
                            "{} ({:?}): {src} read-only={ro}: got {r:?}",
                            e.path, e.access
                        ),
                    }
                }
            }
        }
    }

    #[test]
    fn homes_and_their_parents_are_refused_but_projects_inside_are_not() {
        let homes = Homes::only(&["/srv/home/me"]);
        assert_eq!(
            check("/srv/home/me", true, &homes),
            Err(HomeOrEntry::Home {
                home: "/srv/home/me".into(),
                is: true
            })
        );
        assert_eq!(
            check("/srv/home", true, &homes),
            Err(HomeOrEntry::Home {
                home: "/srv/home/me".into(),
                is: false
            })
        );
        assert_eq!(
            check("/home/bob", true, &homes),
            Err(HomeOrEntry::Home {
                home: "/home/bob".into(),
                is: true
            })
        );
        check("/srv/home/me/projects/x", false, &homes).unwrap();
        check("/home/bob/projects", false, &homes).unwrap();
        // A look-alike name is not the entry.
        check("/srv/home/me/.sshkeys-demo", false, &homes).unwrap();
        check("/usr", true, &homes).unwrap();
        check("/usr/share/doc", true, &homes).unwrap();
    }
}
