//! The size and duration parsers every front end uses for limits (`64m`, `30s`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(bytes) = hull_api::size::parse_size(text) {
        assert!(bytes > 0, "`{text}` parsed as zero bytes");
    }
    if let Ok(d) = hull_api::duration::parse_duration(text) {
        assert!(
            d.as_nanos() >= 1_000_000 && d.as_secs() <= 7 * 86400,
            "`{text}` -> {d:?}"
        );
    }
});
