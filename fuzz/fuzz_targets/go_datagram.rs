//! The ready box's program datagram (`hull_box::proto::go::parse`), which pid 1 parses
//! without allocating.
#![no_main]

use hull_box::proto::go;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut starts = vec![0usize; go::POINTERS];
    let Some((argc, envc, candc)) = go::parse(data, &mut starts) else {
        return;
    };
    // Every string it found ends with a NUL inside the datagram, and the strings re-encode to
    // the same datagram.
    let mut strings = Vec::new();
    for &s in &starts[..argc + envc + candc + 2] {
        if s == go::NULL {
            continue;
        }
        let len = data[s..].iter().position(|&b| b == 0).expect("NUL inside");
        strings.push(std::ffi::CString::new(&data[s..s + len]).expect("no inner NUL"));
    }
    assert_eq!(strings.len(), argc + envc + candc);
    let (argv, rest) = strings.split_at(argc);
    let (env, candidates) = rest.split_at(envc);
    assert_eq!(go::encode(argv, env, candidates).as_deref(), Some(data));
});
