//! The runner's channel (`hull::cell::decode_frame`): code in a cell can write any bytes to it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The reader hands over one line at a time.
    for line in data.split_inclusive(|&b| b == b'\n') {
        let _ = hull::cell::decode_frame(line);
    }
});
