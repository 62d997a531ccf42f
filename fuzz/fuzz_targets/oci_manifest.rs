//! Registry and image-layout documents: an index, a manifest, an image config, and the checks
//! `hull pull` and `hull import` run on them before fetching anything they name.
#![no_main]

use hull_image::checks;
use hull_image::oci::{
    self, Descriptor, DockerArchiveEntry, ImageConfig, Index, Manifest, RunConfig,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = serde_json::from_slice::<Index>(data) {
        let _ = oci::select_platform(&index.manifests, &oci::host_platform());
        for m in &index.manifests {
            let _ = oci::Digest::parse(&m.digest);
            let _ = m.platform.as_ref().map(ToString::to_string);
            let _ = oci::is_index_type(&m.media_type);
            let _ = checks::verify_document(m, data, "manifest");
        }
    }
    if let Ok(manifest) = serde_json::from_slice::<Manifest>(data) {
        if let Ok(layers) = checks::manifest_layers(&manifest) {
            let digests: Vec<_> = layers.into_iter().map(|(_, d, _)| d).collect();
            let plan = checks::unpack_plan(&digests);
            assert!(plan.iter().all(|&i| i < digests.len()));
        }
        let _ = oci::is_config_type(&manifest.config.media_type);
    }
    if let Ok(config) = serde_json::from_slice::<ImageConfig>(data) {
        // The store keeps the run config it read: what it writes reads back the same.
        let kept = serde_json::to_vec(&config.config).expect("serializes");
        assert_eq!(
            serde_json::from_slice::<RunConfig>(&kept).expect("reads back"),
            config.config
        );
    }
    let _ = serde_json::from_slice::<Descriptor>(data);
    // A `docker save` archive's manifest.json.
    let _ = serde_json::from_slice::<Vec<DockerArchiveEntry>>(data);
});
