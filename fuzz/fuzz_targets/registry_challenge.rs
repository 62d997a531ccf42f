//! A registry's `WWW-Authenticate` answer (`auth::parse_challenge`) and the token realm it
//! names (`registry::check_realm`): a registry can answer anything.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(c) = hull_image::auth::parse_challenge(text) {
        if let Some(realm) = c.params.get("realm") {
            let _ = hull_image::registry::check_realm(realm, &[]);
            let _ = hull_image::registry::check_realm(realm, &["127.0.0.1:5000".to_string()]);
        }
    }
});
