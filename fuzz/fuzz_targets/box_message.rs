//! The box's 16-byte messages to its supervisor (`hull_box::proto::Message::decode`): a box
//! that was taken over can send any bytes on its channel.
#![no_main]

use hull_box::proto::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Message::decode(data) {
        // What decodes re-encodes to a record that decodes the same.
        assert_eq!(Message::decode(&m.encode()), Ok(m));
    }
});
