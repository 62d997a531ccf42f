//! [`ImageError`]: why an image could not be imported, pulled, found or read, and the two
//! constructors the store and the pull use. A module of its own (not the store's) so the
//! checks, the store and the pull all use it without importing one another.

use std::io;
use std::path::PathBuf;

use crate::extract;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("`{0}` not found in the image store; `hull images` lists what is here, `hull pull IMAGE` or `hull import PATH` adds one")]
    NotFound(String),
    #[error("{what}")]
    Io { what: String, source: io::Error },
    #[error(
        "{0} is not an OCI image layout (no index.json / oci-layout) nor a docker or OCI archive"
    )]
    UnknownFormat(PathBuf),
    #[error("{what}: {why}")]
    Invalid { what: String, why: String },
    #[error("blob {expected} ({what}): digest mismatch, the content hashes to {actual}; refused, no image was stored")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("no manifest for platform {0} in the image index")]
    NoPlatform(String),
    #[error(transparent)]
    Extract(#[from] extract::ExtractError),
    #[error(
        "image name `{0}` is not valid: use letters, digits and . _ - / : @ (e.g. busybox:latest)"
    )]
    BadName(String),
    #[error(transparent)]
    Reference(#[from] crate::reference::ReferenceError),
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
}

pub(crate) fn io_at(what: impl Into<String>) -> impl FnOnce(io::Error) -> ImageError {
    let what = what.into();
    move |source| ImageError::Io { what, source }
}

pub(crate) fn invalid(what: impl Into<String>, why: impl Into<String>) -> ImageError {
    ImageError::Invalid {
        what: what.into(),
        why: why.into(),
    }
}
