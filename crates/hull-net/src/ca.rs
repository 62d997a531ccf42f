//! The gateway's certificate authority: the per-installation CA in `$HULL_HOME/ca` (or an
//! in-memory one per box) and the leaf certificates it mints, per name, for the hosts whose
//! HTTPS the broker intercepts. The CA key never leaves the gateway: nothing here prints or
//! returns it, and its file is created 0600 inside a directory that appears whole or not at all.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;
use time::OffsetDateTime;
use zeroize::Zeroizing;

use crate::name::Name;

/// The key file inside the CA directory.
pub const KEY_FILE: &str = "ca.key";
/// The certificate file inside the CA directory (what a box's trust bundle gets).
pub const CERT_FILE: &str = "ca.pem";

/// How many leaves are kept (least recently used ones are dropped past it).
pub const LEAF_CACHE: usize = 1024;
/// A leaf's validity, and how long before its end a new one is minted.
const LEAF_LIFE: Duration = Duration::from_secs(24 * 3600);
const LEAF_REFRESH: Duration = Duration::from_secs(5 * 60);
/// Leaves and the CA start a minute in the past: a box's clock may lag the host's.
const BACKDATE: Duration = Duration::from_secs(60);
/// A file's whole text, read from offset 0 whatever its descriptor's offset (at most 1 MiB: a
/// CA's files are a few hundred bytes).
fn read_whole(f: &fs::File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0;
    loop {
        let got = f.read_at(&mut buf[n..], n as u64)?;
        if got == 0 || n + got == buf.len() {
            n += got;
            break;
        }
        n += got;
    }
    buf.truncate(n);
    String::from_utf8(buf).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
}

/// Linux errno values of a rename onto a directory that is not empty.
const ENOTEMPTY: i32 = 39;
const EEXIST: i32 = 17;
const CA_LIFE: Duration = Duration::from_secs(3650 * 24 * 3600);

/// Why the CA could not be loaded, made, or could not sign.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("cannot {what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds only part of a CA (both {KEY_FILE} and {CERT_FILE} are needed); move it away to make a new one")]
    Incomplete { path: PathBuf },
    #[error("{path} is readable by others (mode {mode:o}); a CA key must be 0600")]
    KeyMode { path: PathBuf, mode: u32 },
    #[error("the CA in {path} cannot be read")]
    Parse {
        path: PathBuf,
        #[source]
        source: rcgen::Error,
    },
    #[error("cannot make a key or certificate")]
    Generate(#[source] rcgen::Error),
    #[error("rustls refused the minted leaf key")]
    LeafKey(#[source] rustls::Error),
    #[error("no randomness from the kernel")]
    Random(#[source] getrandom::Error),
}

/// A certificate authority able to mint leaves (see the module comment).
pub struct Ca {
    cert_der: CertificateDer<'static>,
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
    leaves: Mutex<LeafCache>,
}

impl fmt::Debug for Ca {
    // Never the key: only what a log may say about the CA.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ca")
            .field("cert_der_len", &self.cert_der.len())
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// The per-installation CA in `dir` (`$HULL_HOME/ca`), made on first use. Two processes
    /// racing here end with one CA: each builds a complete CA in a private directory beside
    /// `dir` and renames it into place, and the loser of the rename loads the winner's. A
    /// directory holding only one of the two files is refused, never completed or replaced.
    pub fn load_or_create(dir: &Path) -> Result<Ca, CaError> {
        match Ca::load(dir) {
            Err(CaError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {}
            other => return other,
        }
        if has_entries(dir)? {
            return Err(CaError::Incomplete {
                path: dir.to_path_buf(),
            });
        }
        let (ca, stage) = Ca::stage(dir)?;
        let parent = dir.parent().unwrap_or(Path::new("."));
        // rename(2) of a directory onto a missing or empty one is atomic; onto a full one it
        // fails, which is how a lost race shows.
        match fs::rename(&stage, dir) {
            Ok(()) => {
                sync_dir(parent)?;
                Ok(ca)
            }
            Err(e) if matches!(e.raw_os_error(), Some(ENOTEMPTY | EEXIST)) => {
                let _ = fs::remove_dir_all(&stage);
                Ca::load(dir)
            }
            Err(source) => {
                let _ = fs::remove_dir_all(&stage);
                Err(CaError::Io {
                    what: "move into place",
                    path: dir.to_path_buf(),
                    source,
                })
            }
        }
    }

    /// A new CA, complete in a private directory beside `dir` (made 0700 with its parent):
    /// what [`Ca::load_or_create`] and [`Ca::rotate`] move into place.
    fn stage(dir: &Path) -> Result<(Ca, PathBuf), CaError> {
        let (ca, key_pem) = Ca::generate()?;
        let parent = dir.parent().unwrap_or(Path::new("."));
        let stage = parent.join(format!(
            ".{}.new-{}-{}",
            dir.file_name().and_then(|n| n.to_str()).unwrap_or("ca"),
            std::process::id(),
            hex(&random::<4>()?)
        ));
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| CaError::Io { what, path, source }
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(io("create", parent))?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&stage)
            .map_err(io("create", &stage))?;
        let staged = write_file(&stage.join(KEY_FILE), key_pem.as_bytes(), 0o600)
            .and_then(|()| write_file(&stage.join(CERT_FILE), ca.cert_pem.as_bytes(), 0o644))
            .and_then(|()| sync_dir(&stage));
        if let Err(e) = staged {
            let _ = fs::remove_dir_all(&stage);
            return Err(e);
        }
        Ok((ca, stage))
    }

    /// Replaces the CA in `dir` by a new one (`hull ca rotate`), or makes it when there is none.
    /// The new directory is exchanged with the old in one `renameat2(RENAME_EXCHANGE)`, so a
    /// gateway loading meanwhile gets the old pair or the new one, never half of each; the old
    /// is removed after. Running gateways keep the CA they loaded.
    pub fn rotate(dir: &Path) -> Result<Ca, CaError> {
        let (ca, stage) = Ca::stage(dir)?;
        let parent = dir.parent().unwrap_or(Path::new("."));
        let exchanged = rustix::fs::renameat_with(
            rustix::fs::CWD,
            &stage,
            rustix::fs::CWD,
            dir,
            rustix::fs::RenameFlags::EXCHANGE,
        );
        let moved = match exchanged {
            // `stage` now holds the old CA: the new one is in place whether or not it goes.
            Ok(()) => {
                let _ = fs::remove_dir_all(&stage);
                Ok(())
            }
            Err(rustix::io::Errno::NOENT) => fs::rename(&stage, dir),
            Err(e) => Err(e.into()),
        };
        if let Err(source) = moved {
            let _ = fs::remove_dir_all(&stage);
            return Err(CaError::Io {
                what: "move into place",
                path: dir.to_path_buf(),
                source,
            });
        }
        sync_dir(parent)?;
        Ok(ca)
    }

    /// Loads the CA in `dir`; its key must be readable by its owner only.
    pub fn load(dir: &Path) -> Result<Ca, CaError> {
        let key_path = dir.join(KEY_FILE);
        let cert_path = dir.join(CERT_FILE);
        let meta = fs::metadata(&key_path).map_err(|source| CaError::Io {
            what: "read",
            path: key_path.clone(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(CaError::KeyMode {
                path: key_path,
                mode,
            });
        }
        let key_pem =
            Zeroizing::new(fs::read_to_string(&key_path).map_err(|source| CaError::Io {
                what: "read",
                path: key_path.clone(),
                source,
            })?);
        let cert_pem = match fs::read_to_string(&cert_path) {
            Ok(p) => p,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(CaError::Incomplete {
                    path: dir.to_path_buf(),
                })
            }
            Err(source) => {
                return Err(CaError::Io {
                    what: "read",
                    path: cert_path,
                    source,
                })
            }
        };
        Ca::parse(dir, cert_pem, &key_pem)
    }

    fn parse(dir: &Path, cert_pem: String, key_pem: &str) -> Result<Ca, CaError> {
        let parse = |source| CaError::Parse {
            path: dir.to_path_buf(),
            source,
        };
        let key = KeyPair::from_pem(key_pem).map_err(parse)?;
        let issuer = Issuer::from_ca_cert_pem(&cert_pem, key).map_err(parse)?;
        let der = <CertificateDer as PemObject>::from_pem_slice(cert_pem.as_bytes())
            .map_err(|_| parse(rcgen::Error::CouldNotParseCertificate))?;
        Ok(Ca::assemble(der, cert_pem, issuer))
    }

    /// The CA whose certificate and key files are these open files (a confined gateway is
    /// handed them: it opens no path). `shown` names the directory in errors. The key file must
    /// be readable by its owner only, as [`Ca::load`] checks.
    /// Files are read from their start whatever their offset (`pread`): copies of one open
    /// pair (`dup`, sharing an offset) may be read by many gateways.
    pub fn from_files(cert: &fs::File, key: &fs::File, shown: &Path) -> Result<Ca, CaError> {
        let key_path = shown.join(KEY_FILE);
        let io = |path: PathBuf| {
            move |source| CaError::Io {
                what: "read",
                path,
                source,
            }
        };
        let mode = key
            .metadata()
            .map_err(io(key_path.clone()))?
            .permissions()
            .mode()
            & 0o777;
        if mode & 0o077 != 0 {
            return Err(CaError::KeyMode {
                path: key_path,
                mode,
            });
        }
        let key_pem = Zeroizing::new(read_whole(key).map_err(io(key_path))?);
        let cert_pem = read_whole(cert).map_err(io(shown.join(CERT_FILE)))?;
        Ca::parse(shown, cert_pem, &key_pem)
    }

    /// The CA's certificate and key files in `dir`, opened from one descriptor of the
    /// directory, so both come from the same CA even while `hull ca rotate` exchanges it; no
    /// link is followed at either name.
    pub fn open_files(dir: &Path) -> Result<(fs::File, fs::File), CaError> {
        use rustix::fs::{Mode, OFlags};
        let io = |path: PathBuf| {
            move |e: rustix::io::Errno| CaError::Io {
                what: "open",
                path,
                source: e.into(),
            }
        };
        let d = rustix::fs::open(
            dir,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io(dir.to_path_buf()))?;
        let open = |name: &str| {
            rustix::fs::openat(
                &d,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map(fs::File::from)
            .map_err(io(dir.join(name)))
        };
        Ok((open(CERT_FILE)?, open(KEY_FILE)?))
    }

    /// A CA that lives in memory only (`ca: per-box`): gone with the gateway, never on disk.
    pub fn in_memory() -> Result<Ca, CaError> {
        Ok(Ca::generate()?.0)
    }

    fn generate() -> Result<(Ca, Zeroizing<String>), CaError> {
        let key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(CaError::Generate)?;
        let key_pem = Zeroizing::new(key.serialize_pem());
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            format!("hull gateway CA {} {}", hostname(), hex(&random::<4>()?)),
        );
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = SystemTime::now();
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(now + CA_LIFE);
        params.serial_number = Some(serial()?);
        let cert = params.self_signed(&key).map_err(CaError::Generate)?;
        let der = cert.der().clone();
        let pem = cert.pem();
        Ok((Ca::assemble(der, pem, Issuer::new(params, key)), key_pem))
    }

    fn assemble(der: CertificateDer<'static>, pem: String, issuer: Issuer<'static, KeyPair>) -> Ca {
        Ca {
            cert_der: der,
            cert_pem: pem,
            issuer,
            leaves: Mutex::new(LeafCache::new(LEAF_CACHE)),
        }
    }

    /// Keeps at most `n` leaves (tests use a small cache to see eviction).
    pub fn with_leaf_capacity(self, n: usize) -> Ca {
        if let Ok(mut c) = self.leaves.lock() {
            c.capacity = n.max(1);
        }
        self
    }

    /// The CA certificate, PEM: what a box trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// How many leaves have been minted so far (a cache hit mints none).
    pub fn leaves_minted(&self) -> u64 {
        self.leaves.lock().map(|c| c.minted).unwrap_or(0)
    }

    /// The leaf for `name` (SAN = name), from the cache while it has more than five minutes
    /// left, else freshly minted with its own key.
    pub fn leaf(&self, name: &Name) -> Result<Arc<CertifiedKey>, CaError> {
        let now = SystemTime::now();
        let mut cache = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(hit) = cache.get(name, now) {
            return Ok(hit);
        }
        let key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(CaError::Generate)?;
        let mut params =
            CertificateParams::new(vec![name.as_str().to_string()]).map_err(CaError::Generate)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name.as_str());
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = offset(now - BACKDATE);
        params.not_after = offset(now + LEAF_LIFE);
        params.serial_number = Some(serial()?);
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(CaError::Generate)?;
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer =
            rustls::crypto::ring::sign::any_ecdsa_type(&key_der).map_err(CaError::LeafKey)?;
        let leaf = Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert_der.clone()],
            signer,
        ));
        cache.put(name.clone(), leaf.clone(), now + LEAF_LIFE);
        Ok(leaf)
    }
}

/// Leaves by name, least recently used dropped first.
struct LeafCache {
    capacity: usize,
    tick: u64,
    minted: u64,
    map: HashMap<Name, (Arc<CertifiedKey>, SystemTime, u64)>,
}

impl LeafCache {
    fn new(capacity: usize) -> LeafCache {
        LeafCache {
            capacity,
            tick: 0,
            minted: 0,
            map: HashMap::new(),
        }
    }

    fn get(&mut self, name: &Name, now: SystemTime) -> Option<Arc<CertifiedKey>> {
        self.tick += 1;
        let tick = self.tick;
        let (leaf, until, used) = self.map.get_mut(name)?;
        if *until < now + LEAF_REFRESH {
            return None;
        }
        *used = tick;
        Some(leaf.clone())
    }

    fn put(&mut self, name: Name, leaf: Arc<CertifiedKey>, until: SystemTime) {
        self.minted += 1;
        self.tick += 1;
        self.map.insert(name, (leaf, until, self.tick));
        while self.map.len() > self.capacity {
            let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, _, used))| *used)
                .map(|(n, _)| n.clone())
            else {
                break;
            };
            self.map.remove(&oldest);
        }
    }
}

fn has_entries(dir: &Path) -> Result<bool, CaError> {
    match fs::read_dir(dir) {
        Ok(mut it) => Ok(it.next().is_some()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(source) => Err(CaError::Io {
            what: "list",
            path: dir.to_path_buf(),
            source,
        }),
    }
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CaError> {
    let io = |source| CaError::Io {
        what: "write",
        path: path.to_path_buf(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

fn sync_dir(dir: &Path) -> Result<(), CaError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| CaError::Io {
            what: "sync",
            path: dir.to_path_buf(),
            source,
        })
}

fn hostname() -> String {
    let raw = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let clean: String = raw
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        .take(63)
        .collect();
    if clean.is_empty() {
        "host".into()
    } else {
        clean
    }
}

fn random<const N: usize>() -> Result<[u8; N], CaError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(CaError::Random)?;
    Ok(b)
}

/// A positive 128-bit serial (the top bit cleared so DER keeps it unsigned in 16 bytes).
fn serial() -> Result<SerialNumber, CaError> {
    let mut b = random::<16>()?;
    b[0] &= 0x7f;
    b[0] |= 0x01;
    Ok(SerialNumber::from_slice(&b))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn offset(t: SystemTime) -> OffsetDateTime {
    OffsetDateTime::from(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    #[test]
    fn a_racing_creation_makes_one_ca_with_a_private_key_file_and_reloads_it() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("ca");
        let pems: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..6)
                .map(|_| s.spawn(|| Ca::load_or_create(&dir).unwrap().cert_pem().to_string()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(pems.windows(2).all(|w| w[0] == w[1]), "one CA for all");
        let mode = fs::metadata(dir.join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let leftovers: Vec<_> = fs::read_dir(home.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            leftovers,
            vec![std::ffi::OsString::from("ca")],
            "no stage left"
        );
        let again = Ca::load_or_create(&dir).unwrap();
        assert_eq!(again.cert_pem(), pems[0]);
        // The reloaded CA signs leaves that chain to the stored certificate.
        let leaf = again.leaf(&n("api.example.test")).unwrap();
        assert_eq!(leaf.cert[1], *again.cert_der());
    }

    #[test]
    fn rotation_replaces_the_pair_whole_and_leaves_nothing_beside_it() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("ca");
        // No CA yet: rotation makes one.
        let first = Ca::rotate(&dir).unwrap();
        assert_eq!(Ca::load(&dir).unwrap().cert_pem(), first.cert_pem());
        let second = Ca::rotate(&dir).unwrap();
        assert_ne!(second.cert_pem(), first.cert_pem());
        let loaded = Ca::load(&dir).unwrap();
        assert_eq!(loaded.cert_pem(), second.cert_pem());
        // The loaded key signs for the new certificate (the pair matches).
        loaded.leaf(&n("a.example.test")).unwrap();
        let mode = fs::metadata(dir.join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let left: Vec<_> = fs::read_dir(home.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("ca")]);
    }

    #[test]
    fn a_ca_handed_over_as_open_files_is_the_same_and_its_key_must_be_private() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("ca");
        let made = Ca::load_or_create(&dir).unwrap();
        let open = |f: &str| fs::File::open(dir.join(f)).unwrap();
        let got = Ca::from_files(&open(CERT_FILE), &open(KEY_FILE), &dir).unwrap();
        assert_eq!(got.cert_pem(), made.cert_pem());
        got.leaf(&n("a.example.test")).unwrap();
        fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o640)).unwrap();
        let e = Ca::from_files(&open(CERT_FILE), &open(KEY_FILE), &dir).unwrap_err();
        // Opened as one pair; read again through copies whatever their offset.
        fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o600)).unwrap();
        let (c, k) = Ca::open_files(&dir).unwrap();
        for _ in 0..2 {
            let again =
                Ca::from_files(&c.try_clone().unwrap(), &k.try_clone().unwrap(), &dir).unwrap();
            assert_eq!(again.cert_pem(), made.cert_pem());
        }
        assert!(matches!(e, CaError::KeyMode { mode: 0o640, .. }), "{e:?}");
    }

    #[test]
    fn a_half_made_or_open_ca_is_refused_not_replaced() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("ca");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join(KEY_FILE), "half").unwrap();
        fs::set_permissions(dir.join(KEY_FILE), fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            Ca::load_or_create(&dir),
            Err(CaError::Incomplete { .. })
        ));
        assert_eq!(fs::read_to_string(dir.join(KEY_FILE)).unwrap(), "half");

        let dir2 = home.path().join("ca2");
        Ca::load_or_create(&dir2).unwrap();
        fs::set_permissions(dir2.join(KEY_FILE), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Ca::load_or_create(&dir2),
            Err(CaError::KeyMode { mode: 0o644, .. })
        ));
    }

    #[test]
    fn the_ca_is_named_for_the_host_and_never_prints_its_key() {
        let ca = Ca::in_memory().unwrap();
        let shown = format!("{ca:?}");
        assert!(!shown.contains("PRIVATE"), "{shown}");
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    }

    #[test]
    fn the_ca_and_its_leaves_have_the_designed_fields() {
        use x509_parser::prelude::*;
        let ca = Ca::in_memory().unwrap();
        let now = OffsetDateTime::now_utc().unix_timestamp();
        let (_, c) = X509Certificate::from_der(ca.cert_der()).unwrap();
        let cn = c
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        assert!(cn.starts_with("hull gateway CA "), "{cn}");
        assert_eq!(cn.rsplit(' ').next().unwrap().len(), 8, "{cn}");
        let bc = c.basic_constraints().unwrap().unwrap().value;
        assert!(bc.ca);
        assert_eq!(bc.path_len_constraint, Some(0));
        assert!(c.key_usage().unwrap().unwrap().value.key_cert_sign());
        let life = c.validity().not_after.timestamp() - now;
        assert!((3649 * 86400..=3650 * 86400).contains(&life), "{life}");

        let leaf = ca.leaf(&n("API.example.test")).unwrap();
        let (_, l) = X509Certificate::from_der(&leaf.cert[0]).unwrap();
        let san = l.subject_alternative_name().unwrap().unwrap().value;
        assert_eq!(
            san.general_names,
            vec![GeneralName::DNSName("api.example.test")]
        );
        assert!(!l.is_ca());
        assert!(l.extended_key_usage().unwrap().unwrap().value.server_auth);
        let back = now - l.validity().not_before.timestamp();
        assert!((59..=70).contains(&back), "backdated a minute: {back}");
        let ahead = l.validity().not_after.timestamp() - now;
        assert!((86300..=86400).contains(&ahead), "{ahead}");
        assert_eq!(l.issuer(), c.subject());
    }

    #[test]
    fn leaves_are_cached_per_name_and_the_least_recently_used_goes_first() {
        let ca = Ca::in_memory().unwrap().with_leaf_capacity(2);
        let a1 = ca.leaf(&n("a.example.test")).unwrap();
        let a2 = ca.leaf(&n("A.example.test.")).unwrap();
        assert!(Arc::ptr_eq(&a1, &a2), "cache hit");
        assert_eq!(ca.leaves_minted(), 1);
        ca.leaf(&n("b.example.test")).unwrap();
        ca.leaf(&n("a.example.test")).unwrap(); // a is now the most recent
        ca.leaf(&n("c.example.test")).unwrap(); // evicts b
        assert_eq!(ca.leaves_minted(), 3);
        let a3 = ca.leaf(&n("a.example.test")).unwrap();
        assert!(Arc::ptr_eq(&a1, &a3));
        ca.leaf(&n("b.example.test")).unwrap();
        assert_eq!(ca.leaves_minted(), 4, "b was evicted and minted again");
    }
}
