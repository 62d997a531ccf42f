//! The checks every image passes whatever its source, `hull pull` (a registry) or `hull import`
//! (a layout or archive on disk): documents are capped in size, every blob matches its
//! descriptor's size and digest, a manifest lists at most [`MAX_LAYERS`] layers, and which
//! layers are unpacked ([`unpack_plan`]). One place, so the two sources cannot drift apart.

use std::io::Read;

use crate::error::{invalid, ImageError};
use crate::oci::{Descriptor, Digest, Manifest};

pub use crate::oci::DOCUMENT_LIMIT;

/// The most layers an image may have. Docker's layer store refused images deeper than 125
/// layers for years (127, the most some of its storage drivers could stack, less two for a
/// container's own) and its overlay2 driver stacks at most 128 lower directories, so no image
/// Docker runs is refused; the cap bounds the work one small file can ask for.
pub const MAX_LAYERS: usize = 128;

/// Reads a document of at most [`DOCUMENT_LIMIT`] bytes; `what` names it in the refusal.
pub fn read_document(r: impl Read, what: &str) -> Result<Vec<u8>, ImageError> {
    let mut v = Vec::new();
    r.take(DOCUMENT_LIMIT + 1)
        .read_to_end(&mut v)
        .map_err(|e| ImageError::Io {
            what: format!("read {what}"),
            source: e,
        })?;
    if v.len() as u64 > DOCUMENT_LIMIT {
        return Err(too_large(what));
    }
    Ok(v)
}

/// The refusal of a document over [`DOCUMENT_LIMIT`].
pub fn too_large(what: &str) -> ImageError {
    invalid(
        what,
        format!("larger than {DOCUMENT_LIMIT} bytes, the most a manifest, index or config may be; refused"),
    )
}

/// Refuses a blob whose size is not the one its descriptor declares.
pub fn check_size(what: &str, declared: u64, actual: u64) -> Result<(), ImageError> {
    if declared == actual {
        return Ok(());
    }
    Err(invalid(
        what,
        format!("the blob is {actual} bytes but its descriptor says {declared}; refused"),
    ))
}

/// Checks a document's bytes against its descriptor (size, then digest); returns the digest.
pub fn verify_document(desc: &Descriptor, bytes: &[u8], what: &str) -> Result<Digest, ImageError> {
    let want = Digest::parse(&desc.digest)
        .ok_or_else(|| invalid(what, format!("bad digest `{}`", desc.digest)))?;
    check_size(what, desc.size, bytes.len() as u64)?;
    let actual = Digest::of(bytes);
    if actual != want {
        return Err(ImageError::DigestMismatch {
            what: what.into(),
            expected: want.to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(want)
}

/// Refuses more than [`MAX_LAYERS`] layers, naming the limit.
pub fn check_layer_count(what: &str, n: usize) -> Result<(), ImageError> {
    if n <= MAX_LAYERS {
        return Ok(());
    }
    Err(invalid(
        what,
        format!("it lists {n} layers; at most {MAX_LAYERS} are accepted (Docker's overlay2 stacks no more)"),
    ))
}

/// A manifest's layers as (index, digest, declared size), after the count, each media type (a
/// tar layer, plain or compressed) and each digest are checked.
pub fn manifest_layers(manifest: &Manifest) -> Result<Vec<(usize, Digest, u64)>, ImageError> {
    check_layer_count("manifest", manifest.layers.len())?;
    let mut out = Vec::with_capacity(manifest.layers.len());
    for (i, l) in manifest.layers.iter().enumerate() {
        if !crate::oci::is_layer_type(&l.media_type) {
            return Err(invalid(
                format!("layer {i}"),
                format!(
                    "media type `{}` is not a tar, tar+gzip or tar+zstd layer",
                    l.media_type
                ),
            ));
        }
        let d = Digest::parse(&l.digest)
            .ok_or_else(|| invalid(format!("layer {i}"), format!("bad digest `{}`", l.digest)))?;
        out.push((i, d, l.size));
    }
    Ok(out)
}

/// Which of `layers` (in order) to unpack: all but a layer identical to the one right before
/// it. Unpacking a layer again over its own result changes nothing (each member replaces,
/// removes or clears what it names, the same way both times), so a run of one blob is unpacked
/// once. A blob that comes back after another layer is unpacked again: the layer between may
/// have removed or replaced what it holds, and the root must be what applying every layer in
/// order gives (refusing such images would refuse real ones: the empty layer recurs in many).
pub fn unpack_plan(layers: &[Digest]) -> Vec<usize> {
    (0..layers.len())
        .filter(|&i| i == 0 || layers[i] != layers[i - 1])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_one_layer_are_unpacked_once() {
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        assert_eq!(unpack_plan(&[a.clone(), a.clone(), a.clone()]), [0]);
        assert_eq!(
            unpack_plan(&[a.clone(), b.clone(), a.clone(), a.clone(), b.clone()]),
            [0, 1, 2, 4]
        );
        assert!(unpack_plan(&[]).is_empty());
    }
}
