//! Image names as a user or an index writes them: references (`Reference::parse` and what is
//! derived from one), platforms and digests.
#![no_main]

use hull_image::oci::{Digest, Platform};
use hull_image::Reference;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(r) = Reference::parse(text) {
        let _ = r.api_host();
        let _ = r.manifest_ref();
        let _ = r.local_name(text);
    }
    if let Ok(p) = Platform::parse(text) {
        // A parsed platform prints as what parses back to it.
        assert_eq!(Platform::parse(&p.to_string()), Ok(p));
    }
    if let Some(d) = Digest::parse(text) {
        assert_eq!(Digest::parse(&d.to_string()).as_ref(), Some(&d));
        let _ = d.hex();
    }
});
