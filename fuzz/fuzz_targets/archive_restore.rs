//! `sandbox.restore` (`hull::archive::restore`): a `.tar.gz` the caller hands over, restored into
//! a fresh workspace. Everything it writes must stay inside that workspace.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("workspace");
    let src = dir.path().join("in.tar.gz");
    std::fs::write(&src, data).expect("archive");
    let confined = hull::files::Confined::open(&ws).expect("open workspace");
    let _ = hull::archive::restore(&confined, &src);
    // Nothing appeared beside the workspace (only the archive and the workspace itself).
    let mut beside: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    beside.sort();
    assert_eq!(
        beside,
        ["in.tar.gz", "ws"],
        "restore wrote outside the workspace"
    );
});
