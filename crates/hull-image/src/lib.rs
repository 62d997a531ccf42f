//! hull-image: OCI images for hull. This first part is the layer extractor that every image
//! source (registry pulls, `hull import` of OCI layouts and docker archives) goes through.

pub mod extract;

pub use extract::{extract_layer, Compression, ExtractError, Limits, Report};
