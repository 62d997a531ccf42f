//! The image store under `$HULL_HOME/images`: content-addressed blobs, one unpacked root per
//! image (manifest digest) shared read-only by every box, and named references.
//!
//! ```text
//! images/blobs/sha256/<hex>      every blob, verified against its digest before it is kept
//! images/roots/<hex>/rootfs      the unpacked root of manifest <hex>; config.json beside it
//! images/refs/<name>.json        {"name", "digest"}: what `--image NAME` means
//! images/tmp/                    work in progress; renamed into place when complete
//! ```
//! An image becomes visible only by a `rename` of its complete directory, so a crash mid-import
//! leaves nothing half-made under `roots/` (`tmp/` is cleaned by the next `gc`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checks;
use crate::error::{invalid, io_at, ImageError};
use crate::extract::{self, Compression, Limits};
use crate::oci::{
    self, Descriptor, Digest, DockerArchiveEntry, ImageConfig, Index, Manifest, RunConfig,
};
use crate::reference::{Reference, DOCKER_HUB};

/// An image in the store.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ImageInfo {
    pub name: String,
    pub digest: String,
    pub rootfs: PathBuf,
    pub size: u64,
    pub config: RunConfig,
}

/// What an import did.
#[derive(Clone, Debug)]
pub struct ImportReport {
    pub image: ImageInfo,
    /// Layers the manifest lists.
    pub layers: usize,
    /// Layers unpacked this time: none when the image's root was already here, and a layer
    /// repeated right after itself only once ([`checks::unpack_plan`]).
    pub unpacked: usize,
}

#[derive(Serialize, Deserialize)]
struct RefFile {
    name: String,
    digest: String,
}

#[derive(Serialize, Deserialize)]
struct RootMeta {
    digest: String,
    size: u64,
    layers: Vec<String>,
    config: RunConfig,
}

/// `$HULL_HOME`, or `~/.local/share/hull`.
pub fn default_home() -> PathBuf {
    if let Some(h) = std::env::var_os("HULL_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".local/share/hull")
}

pub(crate) fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 255
        && !n.starts_with('.')
        && !n.contains("..")
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@".contains(&b))
}

/// A reference name as a file name: `/` becomes `%2F`, `:` becomes `%3A`.
fn ref_file(name: &str) -> String {
    format!(
        "{}.json",
        name.replace('%', "%25")
            .replace('/', "%2F")
            .replace(':', "%3A")
    )
}

#[derive(Debug)]
pub struct Store {
    pub(crate) dir: PathBuf,
}

/// Whether `path` starts as an image archive can: gzip or zstd (a compressed tar), or a tar
/// header (`ustar` at byte 257).
fn looks_like_archive(path: &Path) -> Result<bool, ImageError> {
    use std::io::Read;
    let f = fs::File::open(path).map_err(io_at(format!("open {}", path.display())))?;
    let mut head = Vec::with_capacity(512);
    f.take(512)
        .read_to_end(&mut head)
        .map_err(io_at(format!("read {}", path.display())))?;
    Ok(head.starts_with(&[0x1f, 0x8b])
        || head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
        || head.get(257..262) == Some(b"ustar"))
}

impl Store {
    /// Opens (creating) the store under `home/images`.
    pub fn open(home: &Path) -> Result<Store, ImageError> {
        let dir = home.join("images");
        for d in ["blobs/sha256", "roots", "refs", "tmp"] {
            fs::create_dir_all(dir.join(d))
                .map_err(io_at(format!("create {}", dir.join(d).display())))?;
        }
        Ok(Store { dir })
    }

    pub(crate) fn blob_path(&self, d: &Digest) -> PathBuf {
        self.dir.join("blobs/sha256").join(d.hex())
    }

    pub(crate) fn root_dir(&self, d: &Digest) -> PathBuf {
        self.dir.join("roots").join(d.hex())
    }

    fn tmp_dir(&self, what: &str) -> Result<PathBuf, ImageError> {
        let p = self
            .dir
            .join("tmp")
            .join(format!("{what}-{}-{}", std::process::id(), nanos()));
        fs::create_dir(&p).map_err(io_at(format!("create {}", p.display())))?;
        Ok(p)
    }

    /// Copies the blob `src` (opened by [`open_in`]) into the blob store, hashing it on the way:
    /// it must hash to `expected` when one is given (an OCI layout; a blob already stored is
    /// not read again), and is stored under what it hashes to otherwise (a docker archive).
    fn put_blob(
        &self,
        src: &mut fs::File,
        expected: Option<&Digest>,
        what: &str,
    ) -> Result<(Digest, PathBuf), ImageError> {
        if let Some(d) = expected {
            let dst = self.blob_path(d);
            if dst.exists() {
                return Ok((d.clone(), dst));
            }
        }
        let tmp = self.dir.join("tmp").join(format!("blob-{}", nanos()));
        let copied = (|| {
            let out = fs::File::create(&tmp)?;
            let mut hashing = oci::HashingWriter::new(out);
            io::copy(src, &mut hashing)?;
            hashing.finish()
        })();
        let actual = match copied {
            Ok(d) => d,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(ImageError::Io {
                    what: format!("copy {what}"),
                    source: e,
                });
            }
        };
        if let Some(expected) = expected.filter(|e| **e != actual) {
            let _ = fs::remove_file(&tmp);
            return Err(ImageError::DigestMismatch {
                what: what.into(),
                expected: expected.to_string(),
                actual: actual.to_string(),
            });
        }
        let dst = self.blob_path(&actual);
        fs::rename(&tmp, &dst).map_err(io_at(format!("store blob {actual}")))?;
        Ok((actual, dst))
    }

    /// Imports an OCI image layout directory, an OCI archive, or a `docker save` archive.
    /// `name` overrides the reference the image is stored under.
    pub fn import(&self, path: &Path, name: Option<&str>) -> Result<ImportReport, ImageError> {
        if let Some(n) = name {
            if !valid_name(n) {
                return Err(ImageError::BadName(n.into()));
            }
        }
        if path.is_dir() {
            return self.import_dir(path, name);
        }
        // An archive: unpack it (through the same hostile-safe extractor) and look inside. A
        // file that is no tar (plain or compressed) is said to be none, before the extractor
        // can quote its bytes back in an error.
        if !looks_like_archive(path)? {
            return Err(ImageError::UnknownFormat(path.to_path_buf()));
        }
        let tmp = self.tmp_dir("archive")?;
        let result = (|| {
            let f = fs::File::open(path).map_err(io_at(format!("open {}", path.display())))?;
            extract::extract_layer(f, Compression::Detect, &tmp, &Limits::default())?;
            self.import_dir(&tmp, name)
        })();
        let _ = fs::remove_dir_all(&tmp);
        result
    }

    fn import_dir(&self, dir: &Path, name: Option<&str>) -> Result<ImportReport, ImageError> {
        if dir.join("index.json").is_file() {
            self.import_oci(dir, name)
        } else if dir.join("manifest.json").is_file() {
            self.import_docker(dir, name)
        } else {
            Err(ImageError::UnknownFormat(dir.to_path_buf()))
        }
    }

    fn read_json<T: for<'de> Deserialize<'de>>(path: &Path, what: &str) -> Result<T, ImageError> {
        let bytes = fs::read(path).map_err(io_at(format!("read {what} {}", path.display())))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| invalid(format!("{what} {}", path.display()), e.to_string()))
    }

    /// A document of an image being imported (`index.json`, `manifest.json`, a config), read
    /// no larger than [`checks::DOCUMENT_LIMIT`] and parsed.
    fn read_document<T: for<'de> Deserialize<'de>>(
        dir: &Path,
        rel: &str,
        what: &str,
    ) -> Result<(T, Vec<u8>), ImageError> {
        let (f, _) = open_in(dir, rel, what)?;
        let bytes = checks::read_document(f, what)?;
        let v = serde_json::from_slice(&bytes).map_err(|e| invalid(what, e.to_string()))?;
        Ok((v, bytes))
    }

    /// Reads a document blob of an OCI layout, checking its size and digest against `desc`.
    fn layout_blob(
        dir: &Path,
        desc: &Descriptor,
        what: &str,
    ) -> Result<(Digest, Vec<u8>), ImageError> {
        let d = Digest::parse(&desc.digest)
            .ok_or_else(|| invalid(what, format!("bad digest `{}`", desc.digest)))?;
        let (f, size) = open_in(dir, &format!("blobs/sha256/{}", d.hex()), what)?;
        if size > checks::DOCUMENT_LIMIT {
            return Err(checks::too_large(what));
        }
        checks::check_size(what, desc.size, size)?;
        let bytes = checks::read_document(f, what)?;
        checks::verify_document(desc, &bytes, what)?;
        Ok((d, bytes))
    }

    fn import_oci(&self, dir: &Path, name: Option<&str>) -> Result<ImportReport, ImageError> {
        let (index, _): (Index, _) = Self::read_document(dir, "index.json", "index.json")?;
        let tag = name.and_then(|n| n.rsplit_once(':').map(|(_, t)| t));
        let pick = index
            .manifests
            .iter()
            .find(|m| {
                tag.is_some_and(|t| {
                    m.annotations
                        .get("org.opencontainers.image.ref.name")
                        .is_some_and(|r| r == t)
                })
            })
            .or_else(|| index.manifests.first())
            .ok_or_else(|| invalid("index.json", "it lists no manifests"))?;
        let ref_name = pick
            .annotations
            .get("org.opencontainers.image.ref.name")
            .cloned();
        let mut desc = pick.clone();
        // A nested index (multi-platform image): choose this host's platform.
        let (mut digest, mut bytes) = Self::layout_blob(dir, &desc, "manifest")?;
        if desc.media_type == oci::MT_OCI_INDEX
            || desc.media_type == oci::MT_DOCKER_LIST
            || serde_json::from_slice::<Index>(&bytes).is_ok()
                && serde_json::from_slice::<Manifest>(&bytes).is_err()
        {
            let nested: Index = serde_json::from_slice(&bytes)
                .map_err(|e| invalid("image index", e.to_string()))?;
            let want = oci::host_platform();
            desc = oci::select_platform(&nested.manifests, &want)
                .cloned()
                .ok_or_else(|| ImageError::NoPlatform(want.to_string()))?;
            (digest, bytes) = Self::layout_blob(dir, &desc, "manifest")?;
        }
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| invalid("manifest", e.to_string()))?;
        let listed = checks::manifest_layers(&manifest)?;
        let (_, config_bytes) = Self::layout_blob(dir, &manifest.config, "config")?;
        let config: ImageConfig = serde_json::from_slice(&config_bytes)
            .map_err(|e| invalid("image config", e.to_string()))?;
        let mut layers: Vec<(Digest, PathBuf, u64)> = Vec::with_capacity(listed.len());
        for (i, d, size) in listed {
            // A blob listed again is the same blob: checked and stored once.
            if let Some(done) = layers.iter().find(|l| l.0 == d).cloned() {
                checks::check_size(&format!("layer {i}"), size, done.2)?;
                layers.push(done);
                continue;
            }
            let what = format!("layer {i}");
            let (mut f, actual) = open_in(dir, &format!("blobs/sha256/{}", d.hex()), &what)?;
            checks::check_size(&what, size, actual)?;
            let (_, p) = self.put_blob(&mut f, Some(&d), &what)?;
            layers.push((d, p, size));
        }
        // The archive's own name when its ref.name is one (`bb:7`, `registry/x:1`, as docker
        // archives carry them); a bare tag (`latest`) is only a tag: `imported:TAG`.
        let name = name
            .map(str::to_string)
            .or(ref_name.map(|r| {
                if r.contains(':') || r.contains('/') {
                    r
                } else {
                    format!("imported:{r}")
                }
            }))
            .unwrap_or_else(|| format!("sha256:{}", &digest.hex()[..12]));
        if !valid_name(&name) {
            return Err(ImageError::BadName(name));
        }
        self.publish(&name, &digest, &layers, config.config)
    }

    fn import_docker(&self, dir: &Path, name: Option<&str>) -> Result<ImportReport, ImageError> {
        let (entries, _): (Vec<DockerArchiveEntry>, _) =
            Self::read_document(dir, "manifest.json", "manifest.json")?;
        let e = entries
            .first()
            .ok_or_else(|| invalid("manifest.json", "it lists no images"))?;
        checks::check_layer_count("manifest.json", e.layers.len())?;
        let (config, config_bytes): (ImageConfig, _) =
            Self::read_document(dir, &e.config, &format!("config {}", e.config))?;
        let mut layers: Vec<(Digest, PathBuf, u64)> = Vec::with_capacity(e.layers.len());
        let mut hashed: Vec<(&str, usize)> = Vec::new();
        let mut ids = vec![Digest::of(&config_bytes).to_string()];
        for (i, l) in e.layers.iter().enumerate() {
            // A path listed again is hashed and stored once.
            if let Some(&(_, j)) = hashed.iter().find(|(p, _)| *p == l.as_str()) {
                let done = layers[j].clone();
                ids.push(done.0.to_string());
                layers.push(done);
                continue;
            }
            let what = format!("layer {i} ({l})");
            let (mut f, size) = open_in(dir, l, &what)?;
            let (d, stored) = self.put_blob(&mut f, None, &what)?;
            ids.push(d.to_string());
            hashed.push((l.as_str(), layers.len()));
            layers.push((d, stored, size));
        }
        // A docker archive has no manifest digest; the image is identified by its config and
        // layers, hashed together.
        let digest = Digest::of(ids.join("\n").as_bytes());
        let name = name
            .map(str::to_string)
            .or_else(|| e.repo_tags.as_ref().and_then(|t| t.first().cloned()))
            .unwrap_or_else(|| format!("sha256:{}", &digest.hex()[..12]));
        if !valid_name(&name) {
            return Err(ImageError::BadName(name));
        }
        self.publish(&name, &digest, &layers, config.config)
    }

    /// Unpacks the layers into a new root (unless this digest is already here) and points the
    /// reference `name` at it. A layer repeated right after itself is unpacked once
    /// ([`checks::unpack_plan`]).
    pub(crate) fn publish(
        &self,
        name: &str,
        digest: &Digest,
        layers: &[(Digest, PathBuf, u64)],
        config: RunConfig,
    ) -> Result<ImportReport, ImageError> {
        checks::check_layer_count("manifest", layers.len())?;
        let root = self.root_dir(digest);
        let mut unpacked = 0;
        if !root.join("meta.json").is_file() {
            let tmp = self.tmp_dir("root")?;
            let made = (|| {
                let rootfs = tmp.join("rootfs");
                fs::create_dir(&rootfs).map_err(io_at("create the image root"))?;
                let allow_devices = rustix::process::geteuid().is_root();
                let limits = Limits {
                    allow_devices,
                    ..Limits::default()
                };
                let digests: Vec<Digest> = layers.iter().map(|l| l.0.clone()).collect();
                for i in checks::unpack_plan(&digests) {
                    let (d, p, _) = &layers[i];
                    let f = fs::File::open(p).map_err(io_at(format!("open layer {d}")))?;
                    extract::extract_layer(f, Compression::Detect, &rootfs, &limits)?;
                    unpacked += 1;
                }
                crate::resolver::add_if_missing(&rootfs)
                    .map_err(io_at("add /etc/resolv.conf to the image root"))?;
                // The image's size counts each blob once.
                let mut distinct: Vec<&(Digest, PathBuf, u64)> = Vec::new();
                for l in layers {
                    if !distinct.iter().any(|x| x.0 == l.0) {
                        distinct.push(l);
                    }
                }
                let meta = RootMeta {
                    digest: digest.to_string(),
                    size: distinct.iter().map(|l| l.2).sum(),
                    layers: layers.iter().map(|l| l.0.to_string()).collect(),
                    config: config.clone(),
                };
                fs::write(
                    tmp.join("meta.json"),
                    serde_json::to_vec_pretty(&meta).unwrap_or_default(),
                )
                .map_err(io_at("write meta.json"))?;
                match fs::rename(&tmp, &root) {
                    Ok(()) => Ok(()),
                    // Another import of the same image won the race; its root is identical.
                    Err(_) if root.join("meta.json").is_file() => Ok(()),
                    Err(e) => Err(io_at(format!("publish {}", root.display()))(e)),
                }
            })();
            if tmp.exists() {
                let _ = remove_tree(&tmp);
            }
            made?;
        }
        self.set_ref(name, digest)?;
        Ok(ImportReport {
            image: self.info(name, digest)?,
            layers: layers.len(),
            unpacked,
        })
    }

    pub(crate) fn set_ref(&self, name: &str, digest: &Digest) -> Result<(), ImageError> {
        let path = self.dir.join("refs").join(ref_file(name));
        let tmp = self.dir.join("tmp").join(format!("ref-{}", nanos()));
        fs::write(
            &tmp,
            serde_json::to_vec(&RefFile {
                name: name.into(),
                digest: digest.to_string(),
            })
            .unwrap_or_default(),
        )
        .map_err(io_at("write a reference"))?;
        fs::rename(&tmp, &path).map_err(io_at(format!("write {}", path.display())))
    }

    pub(crate) fn info(&self, name: &str, digest: &Digest) -> Result<ImageInfo, ImageError> {
        let root = self.root_dir(digest);
        let meta: RootMeta = Self::read_json(&root.join("meta.json"), "image metadata")?;
        Ok(ImageInfo {
            name: name.into(),
            digest: digest.to_string(),
            rootfs: root.join("rootfs"),
            size: meta.size,
            config: meta.config,
        })
    }

    /// Every named image.
    pub fn list(&self) -> Result<Vec<ImageInfo>, ImageError> {
        let mut out = Vec::new();
        for e in fs::read_dir(self.dir.join("refs"))
            .map_err(io_at("list references"))?
            .flatten()
        {
            if let Ok(r) = Self::read_json::<RefFile>(&e.path(), "reference") {
                if let Some(d) = Digest::parse(&r.digest) {
                    if let Ok(i) = self.info(&r.name, &d) {
                        out.push(i);
                    }
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The image `name` (a reference, or a digest or its prefix of 12+ hex digits).
    pub fn resolve(&self, name: &str) -> Result<ImageInfo, ImageError> {
        // `busybox` means `busybox:latest`, as `hull pull busybox` stores it.
        let untagged =
            !name[name.rfind('/').map_or(0, |i| i + 1)..].contains(':') && !name.contains('@');
        let mut names = vec![name.to_string()];
        if untagged {
            names.push(format!("{name}:latest"));
        }
        // A Docker Hub name is found in the full form docker archives store it in too (`bb:7`
        // is `docker.io/library/bb:7`), as the parser `hull pull` uses reads it.
        if let Ok(r) = Reference::parse(name) {
            if r.registry == DOCKER_HUB && r.digest.is_none() {
                let full = format!("{DOCKER_HUB}/{}", r.repository);
                names.push(format!("{full}:{}", r.manifest_ref()));
                if untagged {
                    names.push(full);
                }
            }
        }
        for n in &names {
            let path = self.dir.join("refs").join(ref_file(n));
            if let Ok(r) = Self::read_json::<RefFile>(&path, "reference") {
                if let Some(d) = Digest::parse(&r.digest) {
                    return self.info(&r.name, &d).inspect(Self::complete);
                }
            }
        }
        let hex = name.strip_prefix("sha256:").unwrap_or(name);
        if hex.len() >= 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            if let Some(i) = self
                .list()?
                .into_iter()
                .find(|i| i.digest.trim_start_matches("sha256:").starts_with(hex))
            {
                Self::complete(&i);
                return Ok(i);
            }
        }
        Err(ImageError::NotFound(name.into()))
    }

    /// Gives an image published before the store added `/etc/resolv.conf` the file
    /// ([`crate::resolver`]); best effort: a store this user cannot write keeps the image as it is.
    fn complete(image: &ImageInfo) {
        let _ = crate::resolver::add_if_missing(&image.rootfs);
    }

    /// Removes the reference `name`, then collects garbage.
    pub fn remove(&self, name: &str) -> Result<(), ImageError> {
        let path = self.dir.join("refs").join(ref_file(name));
        if !path.exists() {
            return Err(ImageError::NotFound(name.into()));
        }
        fs::remove_file(&path).map_err(io_at(format!("remove {}", path.display())))?;
        self.gc()
    }

    /// Removes roots no reference points at, blobs no root uses, and leftovers in tmp/.
    pub fn gc(&self) -> Result<(), ImageError> {
        let live: Vec<String> = self.list()?.into_iter().map(|i| i.digest).collect();
        let mut live_blobs: Vec<String> = Vec::new();
        for e in fs::read_dir(self.dir.join("roots"))
            .map_err(io_at("list roots"))?
            .flatten()
        {
            let hex = e.file_name().to_string_lossy().into_owned();
            if live.iter().any(|d| d.ends_with(&hex)) {
                if let Ok(m) =
                    Self::read_json::<RootMeta>(&e.path().join("meta.json"), "image metadata")
                {
                    live_blobs.extend(m.layers);
                }
            } else {
                remove_tree(&e.path()).map_err(io_at(format!("remove {}", e.path().display())))?;
            }
        }
        for e in fs::read_dir(self.dir.join("blobs/sha256"))
            .map_err(io_at("list blobs"))?
            .flatten()
        {
            let d = format!("sha256:{}", e.file_name().to_string_lossy());
            if !live_blobs.contains(&d) {
                let _ = fs::remove_file(e.path());
            }
        }
        for e in fs::read_dir(self.dir.join("tmp"))
            .map_err(io_at("list tmp"))?
            .flatten()
        {
            // Only work older than a minute: a concurrent import may still be using its own.
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|a| a.as_secs() > 60));
            if old {
                let _ = remove_tree(&e.path());
            }
        }
        Ok(())
    }
}

/// Opens `rel` below `dir` (an image layout or an unpacked archive, whose contents may be
/// hostile) with no symlink followed and no `..` leaving it, and checks it is a regular file:
/// a planted link cannot make the import read a host file. Returns the file and its size.
fn open_in(dir: &Path, rel: &str, what: &str) -> Result<(fs::File, u64), ImageError> {
    use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
    let at = |e: rustix::io::Errno| ImageError::Io {
        what: format!("open {what} ({})", dir.join(rel).display()),
        source: e.into(),
    };
    let root = rustix::fs::open(
        dir,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(at)?;
    let fd = rustix::fs::openat2(
        &root,
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => invalid(
            what,
            format!("`{rel}` passes through a symbolic link or leaves the image; refused"),
        ),
        e => at(e),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(at)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(invalid(what, format!("`{rel}` is not a regular file")));
    }
    Ok((fs::File::from(fd), u64::try_from(st.st_size).unwrap_or(0)))
}

/// remove_dir_all that first makes directories writable (image roots hold 0555 dirs).
fn remove_tree(p: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if fs::remove_dir_all(p).is_ok() {
        return Ok(());
    }
    fn fix(d: &Path) {
        let _ = fs::set_permissions(d, fs::Permissions::from_mode(0o755));
        if let Ok(rd) = fs::read_dir(d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    fix(&e.path());
                }
            }
        }
    }
    fix(p);
    fs::remove_dir_all(p)
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
