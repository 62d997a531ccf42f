//! `--user NAME|UID[:GID]` of a named sandbox (a leaf: imports no other module of `named`):
//! resolved in the sandbox's own `/etc/passwd` and `/etc/group`, read from the host side of its
//! writable root (its upper layer, then its template layers, then the image), never through a
//! symlink: what the sandbox wrote there is its own data, and a link in it must not make the
//! keeper read a host file.

use std::path::{Path, PathBuf};

/// A user commands run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Its name (`USER`, `LOGNAME`); the uid as text for an id without a passwd entry.
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: `gid` first, then every group of `/etc/group` listing `name`.
    pub groups: Vec<u32>,
    /// Its home (`HOME`) from passwd; `/` for an id without an entry.
    pub home: String,
}

/// The ids a sandbox maps besides root: 1..=`MAX_ID` (see hull-box's `subids`).
pub const MAX_ID: u32 = 65535;

/// Whether `spec` names root (`root`, `0`, `0:0`): commands run as pid 1 does, and the sandbox
/// needs no more than one id.
pub fn is_root(spec: &str) -> bool {
    matches!(spec, "root" | "0" | "0:0" | "root:0" | "root:root")
}

/// Refuses a user other than root when `fs.suid_dumpable` (the text of
/// `/proc/sys/fs/suid_dumpable`) is 1: then a process that changes its ids stays dumpable, and
/// a program's process, which shares pid 1's memory from its id switch until its exec, could be
/// traced by the user's other processes in that moment (see `docs/named.md` "Users").
pub fn check_dumpable(suid_dumpable: &str) -> Result<(), String> {
    if suid_dumpable.trim() == "1" {
        return Err(
            "this host has fs.suid_dumpable=1 (a debugging setting: processes that change their ids stay traceable by that user), under which a command's process could be traced as it becomes the user; set it to 0 or 2 (`sysctl fs.suid_dumpable=0`)"
                .into(),
        );
    }
    Ok(())
}

/// Refuses a spec that is not `NAME`, `UID`, `NAME:GROUP` or `UID:GID`.
pub fn check_spec(spec: &str) -> Result<(), String> {
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let word = |w: &str| {
        !w.is_empty()
            && w.len() <= 64
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
    };
    if !word(user) || group.is_some_and(|g| !word(g)) {
        return Err(format!(
            "`{spec}` is not a user: give NAME, UID, NAME:GROUP or UID:GID (a user of the image, e.g. node or 1000:1000)"
        ));
    }
    Ok(())
}

/// Resolves `spec` against the text of `/etc/passwd` and `/etc/group`.
pub fn resolve(spec: &str, passwd: &str, group: &str) -> Result<User, String> {
    check_spec(spec)?;
    let (user, grp) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let entries: Vec<Vec<&str>> = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 7)
        .collect();
    let numeric = user.parse::<u32>().ok();
    let found = entries.iter().find(|f| f[0] == user).or_else(|| {
        numeric.and_then(|n| entries.iter().find(|f| f[2].parse::<u32>().ok() == Some(n)))
    });
    let mut u = match (found, numeric) {
        (Some(f), _) => User {
            name: f[0].to_string(),
            uid: f[2]
                .parse()
                .map_err(|_| format!("the box's /etc/passwd has a bad uid for `{}`", f[0]))?,
            gid: f[3]
                .parse()
                .map_err(|_| format!("the box's /etc/passwd has a bad gid for `{}`", f[0]))?,
            groups: Vec::new(),
            home: f[5].to_string(),
        },
        (None, Some(n)) => User {
            name: n.to_string(),
            uid: n,
            gid: n,
            groups: Vec::new(),
            home: "/".into(),
        },
        (None, None) => {
            return Err(format!(
                "no user `{user}` in the box's /etc/passwd; give a user of the image (by name or UID[:GID]), or add one first (a named sandbox's --setup command, e.g. `useradd -m {user}`)"
            ))
        }
    };
    let groups: Vec<Vec<&str>> = group
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 4)
        .collect();
    if let Some(g) = grp {
        u.gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => groups
                .iter()
                .find(|f| f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| format!("no group `{g}` in the box's /etc/group"))?,
        };
    }
    if u.uid > MAX_ID || u.gid > MAX_ID {
        return Err(format!(
            "uid {} / gid {} is past the ids a box maps (0 to {MAX_ID})",
            u.uid, u.gid
        ));
    }
    u.groups.push(u.gid);
    for f in &groups {
        let member = f[3].split(',').any(|m| m == u.name);
        if let Ok(gid) = f[2].parse::<u32>() {
            if member && gid <= MAX_ID && !u.groups.contains(&gid) && u.groups.len() < 64 {
                u.groups.push(gid);
            }
        }
    }
    Ok(u)
}

/// The text of `etc/<file>` in the first of `layers` (top first) that has it: a regular file
/// reached without following any symlink (a whiteout or anything else hides the layers below:
/// empty text). At most 4 MiB is read.
pub fn read_etc(layers: &[PathBuf], file: &str) -> String {
    for layer in layers {
        match crate::beneath::read(layer, &Path::new("etc").join(file), 4 << 20) {
            Ok(bytes) => return String::from_utf8_lossy(&bytes).into_owned(),
            Err(crate::beneath::Unread::Missing) => continue,
            Err(crate::beneath::Unread::Refused) => return String::new(),
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\nsvc:x:70000:70000::/srv:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nnode:x:1000:\nwheel:x:10:node,other\ndocker:x:999:other\n";

    #[test]
    fn users_resolve_by_name_uid_and_group() {
        let node = resolve("node", PASSWD, GROUP).unwrap();
        assert_eq!(
            (node.uid, node.gid, node.home.as_str()),
            (1000, 1000, "/home/node")
        );
        assert_eq!(node.groups, vec![1000, 10]);
        assert_eq!(resolve("1000", PASSWD, GROUP).unwrap().name, "node");
        let g = resolve("node:wheel", PASSWD, GROUP).unwrap();
        assert_eq!((g.gid, g.groups[0]), (10, 10));
        let bare = resolve("4242:7", PASSWD, GROUP).unwrap();
        assert_eq!((bare.uid, bare.gid, bare.home.as_str()), (4242, 7, "/"));
        let err = resolve("bob", PASSWD, GROUP).unwrap_err();
        assert!(
            err.contains("no user `bob`") && err.contains("/etc/passwd"),
            "{err}"
        );
        assert!(resolve("node:nogroup", PASSWD, GROUP).is_err());
        assert!(resolve("svc", PASSWD, GROUP).unwrap_err().contains("65535"));
        assert!(resolve("a b", PASSWD, GROUP).is_err());
        assert!(resolve("", PASSWD, GROUP).is_err());
        assert!(is_root("root") && is_root("0") && !is_root("node"));
        assert!(check_dumpable("0\n").is_ok() && check_dumpable("2\n").is_ok());
        assert!(check_dumpable("1\n")
            .unwrap_err()
            .contains("fs.suid_dumpable"));
    }

    #[test]
    fn etc_files_come_from_the_top_layer_and_never_through_a_symlink() {
        let top = tempfile::tempdir().unwrap();
        let low = tempfile::tempdir().unwrap();
        std::fs::create_dir(low.path().join("etc")).unwrap();
        std::fs::write(low.path().join("etc/passwd"), "low\n").unwrap();
        let layers = [top.path().to_path_buf(), low.path().to_path_buf()];
        assert_eq!(read_etc(&layers, "passwd"), "low\n");
        std::fs::create_dir(top.path().join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", top.path().join("etc/passwd")).unwrap();
        assert_eq!(read_etc(&layers, "passwd"), "", "a symlink is not followed");
        std::fs::remove_file(top.path().join("etc/passwd")).unwrap();
        std::fs::write(top.path().join("etc/passwd"), "top\n").unwrap();
        assert_eq!(read_etc(&layers, "passwd"), "top\n");
    }
}
