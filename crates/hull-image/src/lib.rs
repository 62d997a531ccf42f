//! hull-image: OCI images for hull: the hostile-archive-safe layer extractor every image source
//! goes through, the OCI/Docker documents, and the content-addressed store (`hull import`,
//! `hull images`, `hull rmi`, `hull run --image`). The registry client (`hull pull`) is to come.

pub mod extract;
pub mod oci;
pub mod store;

pub use extract::{extract_layer, Compression, ExtractError, Limits, Report};
pub use store::{default_home, ImageError, ImageInfo, Store};
