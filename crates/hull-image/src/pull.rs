//! `hull pull`: resolve a reference to one platform's manifest, download what the store lacks
//! (in parallel, resumably, every byte sha256-verified), then publish through the store, whose
//! rename-into-place makes the image appear whole or not at all.
//!
//! Partial downloads live at `images/tmp/partial-<hex>` under an exclusive `flock`; a later
//! pull (or a retry within this one) continues them with a `Range` request and hashes the kept
//! prefix first, so the final digest check covers every byte.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use sha2::{Digest as _, Sha256};

use crate::auth;
use crate::checks;
use crate::error::{invalid, io_at, ImageError};
use crate::oci::{self, Digest, ImageConfig, Index, Manifest, Platform};
use crate::reference::Reference;
use crate::registry::{self, Client, ClientOptions};
use crate::store::{valid_name, ImageInfo, Store};

/// How a pull behaves.
#[derive(Clone, Debug)]
pub struct PullOptions {
    pub client: ClientOptions,
    /// The platform to pick from a multi-platform index (default: this host's).
    pub platform: Option<Platform>,
    /// Layers downloaded at once.
    pub parallel: usize,
    /// Attempts per blob when a download breaks off (each later one resumes).
    pub attempts: u32,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            client: ClientOptions::default(),
            platform: None,
            parallel: 3,
            attempts: 3,
        }
    }
}

/// What happened to one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerOutcome {
    /// `bytes` came over the network this time (less than the size when resumed).
    Downloaded { bytes: u64 },
    /// The blob was already in the store.
    AlreadyHere,
}

/// Progress callbacks (the CLI draws bars from them). Called from download threads.
pub trait PullProgress: Sync {
    fn resolved(&self, _manifest: &Digest, _layers: usize) {}
    fn layer_start(&self, _layer: &Digest, _size: u64, _resumed_from: u64) {}
    fn layer_bytes(&self, _layer: &Digest, _n: u64) {}
    fn layer_done(&self, _layer: &Digest, _outcome: LayerOutcome) {}
}

/// No progress output.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;
impl PullProgress for Quiet {}

/// The result of a pull.
#[derive(Clone, Debug)]
pub struct PullReport {
    pub image: ImageInfo,
    /// True when the image's root was already in the store: no blob was requested.
    pub unchanged: bool,
    pub blobs_downloaded: usize,
    pub bytes_downloaded: u64,
    pub blobs_present: usize,
}

/// One layer's download: where the blob is, and whether it came over the network.
type BlobResult = Result<(PathBuf, LayerOutcome), ImageError>;

impl Store {
    /// Pulls `reference` and stores it under `name` (default: the reference as written, with
    /// `:latest` when it had no tag or digest).
    pub fn pull(
        &self,
        reference: &str,
        name: Option<&str>,
        opts: &PullOptions,
        progress: &dyn PullProgress,
    ) -> Result<PullReport, ImageError> {
        let r = Reference::parse(reference)?;
        let name = name.map_or_else(|| r.local_name(reference), str::to_string);
        if !valid_name(&name) {
            return Err(ImageError::BadName(name));
        }
        let files = auth::credential_files(self.dir.parent().unwrap_or(&self.dir));
        let files_text = files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ");
        let creds =
            auth::lookup(&files, &r.registry).map_err(registry::RegistryError::Credentials)?;
        let client = Client::new(&r, opts.client.clone(), creds, files_text);

        let (digest, manifest) = resolve_manifest(
            &client,
            &r,
            opts.platform.clone().unwrap_or_else(oci::host_platform),
        )?;
        progress.resolved(&digest, manifest.layers.len());
        if self.root_dir(&digest).join("meta.json").is_file() {
            self.set_ref(&name, &digest)?;
            return Ok(PullReport {
                image: self.info(&name, &digest)?,
                unchanged: true,
                blobs_downloaded: 0,
                bytes_downloaded: 0,
                blobs_present: manifest.layers.len(),
            });
        }

        // Counted, typed and parsed before any blob is requested.
        let layers = checks::manifest_layers(&manifest)?;
        if !oci::is_config_type(&manifest.config.media_type) {
            return Err(invalid("manifest", format!("config media type `{}` is not a container image config (is this an artifact rather than an image?)", manifest.config.media_type)));
        }
        let config_digest = Digest::parse(&manifest.config.digest).ok_or_else(|| {
            invalid(
                "manifest",
                format!("bad config digest `{}`", manifest.config.digest),
            )
        })?;
        let config_bytes = client.small_blob(&config_digest, "the image config")?;
        checks::verify_document(&manifest.config, &config_bytes, "image config")?;
        let config: ImageConfig = serde_json::from_slice(&config_bytes)
            .map_err(|e| invalid("image config", e.to_string()))?;

        let results = self.download_layers(&client, &layers, opts, progress)?;
        let mut stored = Vec::with_capacity(layers.len());
        let (mut downloaded, mut bytes, mut present) = (0, 0, 0);
        for ((_, d, size), (path, outcome)) in layers.iter().zip(results) {
            match outcome {
                LayerOutcome::Downloaded { bytes: b } => {
                    downloaded += 1;
                    bytes += b;
                }
                LayerOutcome::AlreadyHere => present += 1,
            }
            stored.push((d.clone(), path, *size));
        }
        let image = self.publish(&name, &digest, &stored, config.config)?.image;
        Ok(PullReport {
            image,
            unchanged: false,
            blobs_downloaded: downloaded,
            bytes_downloaded: bytes,
            blobs_present: present,
        })
    }

    /// Downloads the layers with up to `opts.parallel` threads; the first error stops new
    /// downloads and is returned.
    fn download_layers(
        &self,
        client: &Client,
        layers: &[(usize, Digest, u64)],
        opts: &PullOptions,
        progress: &dyn PullProgress,
    ) -> Result<Vec<(PathBuf, LayerOutcome)>, ImageError> {
        let next = Mutex::new(0usize);
        let failed = AtomicBool::new(false);
        let results: Mutex<Vec<Option<BlobResult>>> =
            Mutex::new((0..layers.len()).map(|_| None).collect());
        let threads = opts.parallel.clamp(1, 8).min(layers.len().max(1));
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = {
                        let mut n = next
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if *n >= layers.len() || failed.load(Ordering::Relaxed) {
                            break;
                        }
                        *n += 1;
                        *n - 1
                    };
                    let (idx, d, size) = &layers[i];
                    let r = self.fetch_blob(
                        client,
                        d,
                        *size,
                        &format!("layer {idx}"),
                        opts.attempts,
                        progress,
                    );
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(r);
                });
            }
        });
        let mut out = Vec::with_capacity(layers.len());
        let mut first_err = None;
        for r in results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            match r {
                Some(Ok(v)) => out.push(v),
                Some(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                None => {}
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// One blob into `blobs/sha256/<hex>`, resuming a partial download if one is kept.
    fn fetch_blob(
        &self,
        client: &Client,
        d: &Digest,
        size: u64,
        what: &str,
        attempts: u32,
        progress: &dyn PullProgress,
    ) -> Result<(PathBuf, LayerOutcome), ImageError> {
        let blob = self.blob_path(d);
        if blob.is_file() {
            progress.layer_done(d, LayerOutcome::AlreadyHere);
            return Ok((blob, LayerOutcome::AlreadyHere));
        }
        let partial = self.dir.join("tmp").join(format!("partial-{}", d.hex()));
        let mut f = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&partial)
            .map_err(io_at(format!("open {}", partial.display())))?;
        // Another pull of the same blob holds the lock: wait for it, then use its result.
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| io_at(format!("lock {}", partial.display()))(e.into()))?;
        if blob.is_file() {
            // The other pull finished it; drop the empty file our open may have created.
            if f.metadata().is_ok_and(|m| m.len() == 0) {
                let _ = fs::remove_file(&partial);
            }
            progress.layer_done(d, LayerOutcome::AlreadyHere);
            return Ok((blob, LayerOutcome::AlreadyHere));
        }
        let mut have = f.metadata().map_err(io_at("stat a partial blob"))?.len();
        if have > size {
            f.set_len(0).map_err(io_at("truncate a partial blob"))?;
            have = 0;
        }
        // Hash the bytes kept from an earlier attempt.
        let mut hasher = Sha256::new();
        if have > 0 {
            let mut r = File::open(&partial)
                .map_err(io_at("reopen a partial blob"))?
                .take(have);
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = r.read(&mut buf).map_err(io_at("read a partial blob"))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
        progress.layer_start(d, size, have);
        let mut fetched = 0u64;
        let mut attempt = 0;
        while have < size {
            attempt += 1;
            let (status, mut body) = client.blob_stream(d, have, what)?;
            if status != 206 && have > 0 {
                // The registry ignored the range: start over.
                f.set_len(0).map_err(io_at("truncate a partial blob"))?;
                hasher = Sha256::new();
                have = 0;
            }
            let mut buf = vec![0u8; 1 << 16];
            let broke = loop {
                let n = match body.read(&mut buf) {
                    Ok(0) => break None,
                    Ok(n) => n,
                    Err(e) => break Some(e),
                };
                let n64 = n as u64;
                if have + n64 > size {
                    let _ = fs::remove_file(&partial);
                    return Err(invalid(what, format!("the registry sent more than the {size} bytes its manifest declares; refused")));
                }
                f.write_all(&buf[..n])
                    .map_err(io_at(format!("write {}", partial.display())))?;
                hasher.update(&buf[..n]);
                have += n64;
                fetched += n64;
                progress.layer_bytes(d, n64);
            };
            match broke {
                Some(e) if attempt < attempts => {
                    // Keep what arrived; the next attempt asks for the rest.
                    let _ = e;
                }
                Some(e) => return Err(client.body_error(what, e).into()),
                None if have < size && attempt < attempts => {}
                None if have < size => {
                    return Err(invalid(
                        what,
                        format!(
                        "the registry sent {have} of {size} bytes; run the pull again to resume"
                    ),
                    ))
                }
                None => {}
            }
        }
        let actual = oci::hex(&hasher.finalize());
        if actual != d.hex() {
            let _ = fs::remove_file(&partial);
            return Err(ImageError::DigestMismatch {
                what: what.into(),
                expected: d.to_string(),
                actual: format!("sha256:{actual}"),
            });
        }
        fs::rename(&partial, &blob).map_err(io_at(format!("store blob {d}")))?;
        let outcome = LayerOutcome::Downloaded { bytes: fetched };
        progress.layer_done(d, outcome);
        Ok((blob, outcome))
    }
}

/// The manifest for `r` (following an index to `platform`), its digest verified: against the
/// pinned digest when `r` has one, and against the index's descriptor when one was followed.
fn resolve_manifest(
    client: &Client,
    r: &Reference,
    platform: Platform,
) -> Result<(Digest, Manifest), ImageError> {
    let (bytes, media_type) = client.manifest(&r.manifest_ref())?;
    let mut digest = Digest::of(&bytes);
    if let Some(pinned) = &r.digest {
        if &digest != pinned {
            return Err(ImageError::DigestMismatch {
                what: format!("manifest {}@{pinned}", r.repository),
                expected: pinned.to_string(),
                actual: digest.to_string(),
            });
        }
    }
    let (bytes, media_type) = if oci::is_index_type(&media_type) {
        let index: Index =
            serde_json::from_slice(&bytes).map_err(|e| invalid("image index", e.to_string()))?;
        let desc = oci::select_platform(&index.manifests, &platform).ok_or_else(|| {
            let have: Vec<String> = index
                .manifests
                .iter()
                .filter_map(|m| m.platform.as_ref().map(ToString::to_string))
                .collect();
            ImageError::NoPlatform(format!(
                "{platform} (the index has: {}; choose one with --platform)",
                have.join(", ")
            ))
        })?;
        let want = Digest::parse(&desc.digest)
            .ok_or_else(|| invalid("image index", format!("bad digest `{}`", desc.digest)))?;
        let (b, mt) = client.manifest(&want.to_string())?;
        digest = checks::verify_document(desc, &b, &format!("manifest for {platform}"))?;
        (b, mt)
    } else {
        (bytes, media_type)
    };
    match media_type.as_str() {
        oci::MT_OCI_MANIFEST | oci::MT_DOCKER_MANIFEST | "" => {}
        "application/vnd.docker.distribution.manifest.v1+json"
        | "application/vnd.docker.distribution.manifest.v1+prettyjws" => {
            return Err(invalid("manifest", "Docker schema 1 manifests (deprecated since 2017) are not supported; push the image again with a current tool"));
        }
        other if oci::is_index_type(other) => {
            return Err(invalid(
                "manifest",
                "an index inside an index is not supported",
            ))
        }
        other => {
            return Err(invalid(
                "manifest",
                format!("unsupported media type `{other}`"),
            ))
        }
    }
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| invalid("manifest", e.to_string()))?;
    Ok((digest, manifest))
}
