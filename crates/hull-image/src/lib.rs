//! hull-image: OCI images for hull: the hostile-archive-safe layer extractor every image source
//! goes through, the OCI/Docker documents, the content-addressed store (`hull import`,
//! `hull images`, `hull rmi`, `hull run --image`) and the registry client (`hull pull`).

pub mod auth;
pub mod checks;
pub mod error;
pub mod extract;
pub mod oci;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod resolver;
pub mod store;

pub use error::ImageError;
pub use extract::{extract_layer, Compression, ExtractError, Limits, Report};
pub use pull::{LayerOutcome, PullOptions, PullProgress, PullReport};
pub use reference::Reference;
pub use registry::{ClientOptions, RegistryError};
pub use store::{default_home, ImageInfo, ImportReport, Store};
