//! A DNS message from a box as the gateway answers it (`hull_net::dns::answer`): any bytes are
//! answered or dropped, never a panic, and every reply parses back as a response to the same id
//! whose answers hold only synthetic addresses.
#![no_main]

use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::RData;
use hull_net::dns::{answer, Answer};
use hull_net::policy::{Mode, Policy};
use hull_net::synth::Pool;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let policy = Policy::new(
        Mode::Custom,
        &["*.example.test", "api.test"],
        &["192.0.2.0/24"],
        &["192.0.2.128/25"],
    )
    .expect("a valid policy");
    let mut pool = Pool::new(8);
    if let (Answer::Reply(bytes), _) = answer(data, &policy, &mut pool) {
        let m = Message::from_vec(&bytes).expect("a reply parses");
        assert_eq!(m.message_type(), MessageType::Response);
        assert_eq!(
            Some(m.id()),
            data.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]))
        );
        for r in m.answers() {
            if let RData::A(a) = r.data() {
                assert_eq!(a.octets()[..1], [198], "only synthetic addresses: {a:?}");
            }
        }
    }
});
