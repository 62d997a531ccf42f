//! The few OCI image-spec and Docker archive documents hull reads, as serde structs, and
//! digest checking. Only the fields hull uses are declared; unknown fields are ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

pub const MT_OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MT_OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MT_DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const MT_DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// Manifests, indexes and configs larger than this are refused (real ones are a few KiB).
pub const DOCUMENT_LIMIT: u64 = 4 << 20;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Platform {
    pub architecture: String,
    pub os: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OCI index or Docker manifest list.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    #[serde(default)]
    pub media_type: String,
    pub manifests: Vec<Descriptor>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    #[serde(default)]
    pub media_type: String,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// The parts of an image configuration a box applies.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct RunConfig {
    #[serde(rename = "Env", default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    #[serde(
        rename = "Entrypoint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    #[serde(
        rename = "WorkingDir",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub working_dir: Option<String>,
    #[serde(rename = "User", default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ImageConfig {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub config: RunConfig,
}

/// One entry of a `docker save` archive's manifest.json.
#[derive(Clone, Debug, Deserialize)]
pub struct DockerArchiveEntry {
    #[serde(rename = "Config")]
    pub config: String,
    #[serde(rename = "RepoTags", default)]
    pub repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers")]
    pub layers: Vec<String>,
}

/// The platform of this build, in OCI words.
pub fn host_platform() -> Platform {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    Platform {
        architecture: architecture.into(),
        os: "linux".into(),
        variant: None,
    }
}

impl Platform {
    /// Parses `os/arch[/variant]`, e.g. `linux/arm64` or `linux/arm/v7`.
    pub fn parse(text: &str) -> Result<Platform, String> {
        let parts: Vec<&str> = text.split('/').collect();
        let ok = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Ok(Platform { os: (*os).into(), architecture: (*arch).into(), variant: None }),
            [os, arch, v] if ok(os) && ok(arch) && ok(v) => Ok(Platform { os: (*os).into(), architecture: (*arch).into(), variant: Some((*v).into()) }),
            _ => Err(format!("--platform `{text}`: write it as OS/ARCH[/VARIANT], e.g. linux/amd64 or linux/arm64")),
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// The entry of an index for `want`: os and architecture must match; a variant, when asked
/// for, must match too.
pub fn select_platform<'a>(manifests: &'a [Descriptor], want: &Platform) -> Option<&'a Descriptor> {
    manifests.iter().find(|m| {
        m.platform.as_ref().is_some_and(|p| {
            p.os == want.os
                && p.architecture == want.architecture
                && want
                    .variant
                    .as_ref()
                    .is_none_or(|v| p.variant.as_ref() == Some(v))
        })
    })
}

/// A parsed `sha256:<64 hex>` digest.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(String);

impl Digest {
    pub fn parse(s: &str) -> Option<Digest> {
        let hex = s.strip_prefix("sha256:")?;
        (hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Digest(hex.to_string()))
    }

    pub fn of(bytes: &[u8]) -> Digest {
        Digest(hex(&Sha256::digest(bytes)))
    }

    pub fn hex(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A writer that hashes what passes through it.
#[derive(Debug)]
pub struct HashingWriter<W> {
    inner: W,
    hash: Sha256,
}

impl<W: std::io::Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hash: Sha256::new(),
        }
    }

    /// Flushes the writer and returns the digest of everything written.
    pub fn finish(mut self) -> std::io::Result<Digest> {
        self.inner.flush()?;
        Ok(Digest(hex(&self.hash.finalize())))
    }
}

impl<W: std::io::Write> std::io::Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// True if `media_type` is a layer hull can unpack (tar, gzip or zstd; OCI or Docker names).
pub fn is_layer_type(media_type: &str) -> bool {
    media_type.is_empty()
        || matches!(
            media_type,
            "application/vnd.oci.image.layer.v1.tar"
                | "application/vnd.oci.image.layer.v1.tar+gzip"
                | "application/vnd.oci.image.layer.v1.tar+zstd"
                | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
                | "application/vnd.docker.image.rootfs.diff.tar.gzip"
                | "application/vnd.docker.image.rootfs.diff.tar"
                | "application/vnd.docker.image.rootfs.diff.tar.zstd"
        )
}

/// True if `media_type` is an image config hull understands.
pub fn is_config_type(media_type: &str) -> bool {
    media_type.is_empty()
        || media_type == "application/vnd.oci.image.config.v1+json"
        || media_type == "application/vnd.docker.container.image.v1+json"
}

/// True for a multi-platform document.
pub fn is_index_type(media_type: &str) -> bool {
    media_type == MT_OCI_INDEX || media_type == MT_DOCKER_LIST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types() {
        assert!(is_layer_type("application/vnd.oci.image.layer.v1.tar+zstd"));
        assert!(!is_layer_type(
            "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
        ));
        assert!(!is_config_type("application/vnd.cncf.helm.config.v1+json"));
    }

    #[test]
    fn digests_parse_strictly() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(&d.to_string()), Some(d));
        assert!(Digest::parse("sha256:../../etc").is_none());
        assert!(Digest::parse("md5:00").is_none());
        assert!(Digest::parse("sha256:ABC").is_none());
    }

    #[test]
    fn platforms_parse_and_select() {
        let p = Platform::parse("linux/arm/v7").unwrap();
        assert_eq!(p.to_string(), "linux/arm/v7");
        assert!(
            Platform::parse("linux").is_err()
                && Platform::parse("linux/").is_err()
                && Platform::parse("a/b/c/d").is_err()
        );
        let d = |arch: &str, v: Option<&str>| Descriptor {
            media_type: MT_OCI_MANIFEST.into(),
            digest: format!("sha256:{arch}"),
            size: 1,
            platform: Some(Platform {
                os: "linux".into(),
                architecture: arch.into(),
                variant: v.map(Into::into),
            }),
            annotations: BTreeMap::new(),
        };
        let list = vec![d("arm", Some("v6")), d("arm", Some("v7")), d("amd64", None)];
        assert_eq!(
            select_platform(&list, &Platform::parse("linux/arm/v7").unwrap())
                .unwrap()
                .platform
                .as_ref()
                .unwrap()
                .variant
                .as_deref(),
            Some("v7")
        );
        assert_eq!(
            select_platform(&list, &Platform::parse("linux/amd64").unwrap())
                .unwrap()
                .digest,
            "sha256:amd64"
        );
        assert!(select_platform(&list, &Platform::parse("linux/s390x").unwrap()).is_none());
    }
}
