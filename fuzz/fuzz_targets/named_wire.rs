//! A named sandbox's control protocol as its keeper reads it (`hull_cli::named::wire`): a
//! request line, then frames; and pid 1's resident requests (`hull_box::proto::resident`).
#![no_main]

use hull_box::proto::resident;
use hull_cli::named::wire;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The request line.
    let line = data.split(|&b| b == b'\n').next().unwrap_or_default();
    if let Ok(req) = serde_json::from_slice::<wire::Request>(line) {
        // What parses re-serialises to a request that parses the same.
        let again = serde_json::to_vec(&req).expect("serialise");
        assert_eq!(
            serde_json::from_slice::<wire::Request>(&again).ok(),
            Some(req)
        );
    }
    // Frames: each is read whole or refused, never past the cap.
    let mut r = data;
    while let Ok(Some((_, payload))) = wire::read_frame(&mut r) {
        assert!(payload.len() <= wire::MAX_FRAME as usize);
    }
    // Pid 1's side: groups and a working directory inside the datagram, or nothing.
    if let Some(sp) = resident::split(data) {
        assert!(sp.cwd_at < sp.go_at && sp.go_at <= data.len() && data[sp.go_at - 1] == 0);
        assert!(sp.groups <= resident::MAX_GROUPS);
        for n in 0..sp.groups {
            assert!(resident::group(data, n).is_some());
        }
    }
    if let Some(h) = resident::parse_hand_over(data) {
        if let Ok(path) = std::str::from_utf8(h.path) {
            if path.starts_with('/') && path.len() < 4096 {
                // It re-encodes to a request that reads the same (byte for byte when its flag
                // word is 0 or 1; any other non-zero word reads as 1).
                let again = resident::hand_over(path, h.uid, h.gid, h.only_made).expect("encodes");
                assert_eq!(resident::parse_hand_over(&again), Some(h));
                if data[12..16] == [0, 0, 0, 0] || data[12..16] == [1, 0, 0, 0] {
                    assert_eq!(again, data);
                }
            }
        }
    }
    if let Some((pid, sig)) = resident::parse_kill(data) {
        assert_eq!(resident::kill(pid, sig).as_slice(), data);
    }
});
