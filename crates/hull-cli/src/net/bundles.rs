//! The gateway CA in a brokered box's system trust: copies of the box root's own CA bundles with
//! the CA appended, mounted read-only over them. The environment ([`super::plan::brokered`])
//! reaches programs that read `SSL_CERT_FILE` and its kin; these reach the rest (Go programs,
//! Java, curl or Python with the variables cleared), which read the distribution's bundle at its
//! well-known path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hull_box::{BindMount, BoxSpec, RootSpec};

/// Where distributions keep the bundle of trusted CAs, as regular files: Debian, Ubuntu and
/// Alpine; Fedora and RHEL (and the link most programs name); Arch; openSUSE; Alpine's and the
/// BSDs' `cert.pem`. Links among them reach one of the files covered.
pub const SYSTEM_BUNDLES: &[&str] = &[
    "etc/ssl/certs/ca-certificates.crt",
    "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "etc/pki/tls/certs/ca-bundle.crt",
    "etc/ca-certificates/extracted/tls-ca-bundle.pem",
    "etc/ssl/ca-bundle.pem",
    "etc/ssl/cert.pem",
];

/// A bundle larger than this is not copied (the system bundles are ~200 KiB).
const MAX_BUNDLE: u64 = 16 << 20;

/// The copies made in a trust directory, per box root (a session's boxes share them).
#[derive(Debug, Default)]
pub struct Bundles {
    made: Mutex<HashMap<PathBuf, Vec<BindMount>>>,
}

impl Bundles {
    /// The mounts that put the CA into `spec`'s system bundles: for each bundle its root has
    /// (a regular file, no link on the way) and no mount of the caller's covers, a copy with
    /// `ca_pem` appended, written into `dir` once per root.
    pub fn mounts(&self, spec: &BoxSpec, dir: &Path, ca_pem: &str) -> Vec<BindMount> {
        // A writable root's files are the box's own (its upper layer may hold links where the
        // image has files, and may carry CAs the box added): it trusts the CA through the
        // environment only.
        if spec.writable_root.is_some() {
            return Vec::new();
        }
        let root = match &spec.root {
            RootSpec::Dir(d) => d.clone(),
            RootSpec::Host => PathBuf::from("/"),
        };
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        let n = made.len();
        let mounts = made
            .entry(root.clone())
            .or_insert_with(|| copies(&root, dir, n, ca_pem));
        mounts
            .iter()
            .filter(|m| {
                !spec
                    .mounts
                    .iter()
                    .any(|u| hull_box::spec::is_within(&m.target, &u.target))
            })
            .cloned()
            .collect()
    }
}

/// Writes `dir/bundle-N-I.pem` for each system bundle `root` has; a copy that cannot be written
/// is left out (the environment still names the CA).
fn copies(root: &Path, dir: &Path, n: usize, ca_pem: &str) -> Vec<BindMount> {
    let mut out = Vec::new();
    for (i, rel) in SYSTEM_BUNDLES.iter().enumerate() {
        let Ok(mut text) = crate::beneath::read(root, Path::new(rel), MAX_BUNDLE) else {
            continue;
        };
        if !text.ends_with(b"\n") {
            text.push(b'\n');
        }
        text.extend_from_slice(ca_pem.as_bytes());
        let copy = dir.join(format!("bundle-{n}-{i}.pem"));
        if world_readable(&copy, &text).is_ok() {
            out.push(BindMount {
                source: copy,
                target: format!("/{rel}"),
                read_only: true,
            });
        }
    }
    out
}

/// Writes `bytes` to a new file at `path`, readable by all (0644 whatever the umask).
pub fn world_readable(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
}

#[cfg(test)]
mod tests {
    use super::Bundles;
    use hull_box::{BindMount, BoxSpec, RootSpec};

    #[test]
    fn each_bundle_the_root_has_gets_a_copy_with_the_ca_once_per_root() {
        let root = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc/ssl/certs")).unwrap();
        std::fs::write(
            root.path().join("etc/ssl/certs/ca-certificates.crt"),
            "SYSTEM",
        )
        .unwrap();
        // A link is never read (it could name a host file): the file it reaches is covered.
        std::os::unix::fs::symlink("/etc/hostname", root.path().join("etc/ssl/cert.pem")).unwrap();
        let mut spec = BoxSpec::new(vec!["true".into()]);
        spec.root = RootSpec::Dir(root.path().to_path_buf());
        let b = Bundles::default();
        let m = b.mounts(&spec, dir.path(), "CA\n");
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].target, "/etc/ssl/certs/ca-certificates.crt");
        assert!(m[0].read_only);
        assert_eq!(
            std::fs::read_to_string(&m[0].source).unwrap(),
            "SYSTEM\nCA\n"
        );
        // Once per root: a second box gets the same copy.
        std::fs::write(
            root.path().join("etc/ssl/certs/ca-certificates.crt"),
            "CHANGED",
        )
        .unwrap();
        assert_eq!(b.mounts(&spec, dir.path(), "CA\n"), m);
        // A caller's own mount there (or above) wins.
        spec.mounts.push(BindMount {
            source: "/tmp".into(),
            target: "/etc/ssl".into(),
            read_only: true,
        });
        assert!(b.mounts(&spec, dir.path(), "CA\n").is_empty());
    }
}
