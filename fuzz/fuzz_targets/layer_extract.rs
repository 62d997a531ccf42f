//! An image layer (`hull_image::extract_layer`): a registry or an imported archive can hold any
//! bytes. Extracted into a fresh root, with small limits so each run stays quick.
#![no_main]

use hull_image::{extract_layer, Compression, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let limits = Limits {
        max_bytes: 1 << 20,
        max_entries: 1000,
        ..Limits::default()
    };
    if let Ok(report) = extract_layer(data, Compression::Detect, &root, &limits) {
        assert!(report.bytes <= limits.max_bytes, "{report:?}");
        assert!(report.entries <= limits.max_entries, "{report:?}");
    }
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(beside, ["root"], "extraction wrote outside the root");
});
