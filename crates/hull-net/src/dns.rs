//! The gateway's DNS answers: every query a box sends (to any address, port 53) is answered
//! here from the policy, never forwarded as asked. An allowed name's `A` query gets its
//! synthetic address ([`crate::synth`]); `AAAA`, `HTTPS` and `SVCB` (which carry addresses and
//! ECH keys) get an empty answer so clients fall back to `A`; `PTR` of a synthetic address gets
//! its name; other types of an allowed name (TXT, MX, SRV, CAA, ...) are for the host's
//! resolver ([`Answer::Forward`]); a name the policy refuses is NXDOMAIN. No real address
//! reaches the box through DNS.

use std::net::Ipv4Addr;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{rdata, RData, Record, RecordType};

use crate::name::Name;
use crate::policy::{Policy, Verdict};
use crate::synth::Pool;

/// The TTL of a synthetic answer: short, so a box asks again (and is judged again) soon.
pub const TTL: u32 = 60;

/// What to do with one query.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Send these bytes back.
    Reply(Vec<u8>),
    /// Ask the host's resolver for `name`'s records of this type and relay them (the name is
    /// allowed; the type carries no address).
    Forward { name: Name, record_type: u16 },
    /// Not a query (or not parseable): send nothing.
    Drop,
}

/// One decision, for the gateway's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub name: String,
    pub record_type: u16,
    pub verdict: Option<Verdict>,
}

fn reply(query: &Message, code: ResponseCode, answers: Vec<Record>) -> Answer {
    let mut m = Message::new();
    m.set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true)
        .set_response_code(code);
    m.add_queries(query.queries().iter().cloned());
    m.add_answers(answers);
    match m.to_vec() {
        Ok(bytes) => Answer::Reply(bytes),
        Err(_) => Answer::Drop,
    }
}

/// The synthetic address a reverse name (`d.c.b.a.in-addr.arpa`) stands for.
fn reverse_v4(name: &str) -> Option<Ipv4Addr> {
    let rest = name.strip_suffix(".in-addr.arpa")?;
    let mut octets = [0u8; 4];
    let parts: Vec<&str> = rest.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    for (i, p) in parts.iter().rev().enumerate() {
        octets[i] = p.parse().ok()?;
    }
    Some(Ipv4Addr::from(octets))
}

/// Answers one DNS message from a box (see the module comment).
pub fn answer(bytes: &[u8], policy: &Policy, pool: &mut Pool) -> (Answer, Option<Decided>) {
    let Ok(query) = Message::from_vec(bytes) else {
        return (Answer::Drop, None);
    };
    if query.message_type() != MessageType::Query {
        return (Answer::Drop, None);
    }
    if query.op_code() != OpCode::Query {
        return (reply(&query, ResponseCode::NotImp, vec![]), None);
    }
    let [q]: &[Query; 1] = match query.queries().try_into() {
        Ok(q) => q,
        Err(_) => return (reply(&query, ResponseCode::FormErr, vec![]), None),
    };
    let asked = q.name().to_ascii();
    let record_type = u16::from(q.query_type());
    let decided = |verdict| Decided {
        name: asked.clone(),
        record_type,
        verdict,
    };
    let Ok(name) = Name::parse(&asked) else {
        return (
            reply(&query, ResponseCode::NXDomain, vec![]),
            Some(decided(None)),
        );
    };
    if q.query_type() == RecordType::PTR {
        let found = reverse_v4(name.as_str()).and_then(|a| pool.name_of(a).cloned());
        return match found.and_then(|n| hickory_proto::rr::Name::from_ascii(format!("{n}.")).ok()) {
            Some(target) => {
                let rec = Record::from_rdata(q.name().clone(), TTL, RData::PTR(rdata::PTR(target)));
                (
                    reply(&query, ResponseCode::NoError, vec![rec]),
                    Some(decided(None)),
                )
            }
            None => (
                reply(&query, ResponseCode::NXDomain, vec![]),
                Some(decided(None)),
            ),
        };
    }
    let verdict = policy.judge_name(&name);
    if !verdict.allowed() {
        return (
            reply(&query, ResponseCode::NXDomain, vec![]),
            Some(decided(Some(verdict))),
        );
    }
    let out = match q.query_type() {
        RecordType::A => match pool.address_of(&name) {
            Ok(addr) => {
                let rec = Record::from_rdata(q.name().clone(), TTL, RData::A(rdata::A(addr)));
                reply(&query, ResponseCode::NoError, vec![rec])
            }
            Err(_) => reply(&query, ResponseCode::ServFail, vec![]),
        },
        RecordType::AAAA | RecordType::HTTPS | RecordType::SVCB | RecordType::ANY => {
            reply(&query, ResponseCode::NoError, vec![])
        }
        _ => Answer::Forward {
            name: name.clone(),
            record_type,
        },
    };
    (out, Some(decided(Some(verdict))))
}

/// The reply refusing a query: REFUSED, so a client stops asking this server (past the DNS
/// rate, and for a forwardable query over TCP, which the gateway answers in order and does not
/// forward).
pub fn refused(bytes: &[u8]) -> Option<Vec<u8>> {
    let query = Message::from_vec(bytes).ok()?;
    match reply(&query, ResponseCode::Refused, vec![]) {
        Answer::Reply(b) => Some(b),
        _ => None,
    }
}

/// The reply to a forwarded query (see [`Answer::Forward`]) from what the host's resolver found:
/// only records of the asked type and the CNAMEs leading to them, in the answer section (no
/// authority or additional records: an SRV's or MX's targets are names the box asks for again,
/// and the policy judges them; no address reaches the box this way); a failure is SERVFAIL.
pub fn forwarded(query_bytes: &[u8], found: &std::io::Result<Vec<Record>>) -> Option<Vec<u8>> {
    let query = Message::from_vec(query_bytes).ok()?;
    let asked = query.queries().first()?.query_type();
    let answer = match found {
        Ok(records) => {
            let keep = records
                .iter()
                .filter(|r| r.record_type() == asked || r.record_type() == RecordType::CNAME)
                .filter(|r| !matches!(r.record_type(), RecordType::A | RecordType::AAAA))
                .cloned()
                .collect();
            reply(&query, ResponseCode::NoError, keep)
        }
        Err(_) => reply(&query, ResponseCode::ServFail, vec![]),
    };
    match answer {
        Answer::Reply(b) => Some(b),
        _ => None,
    }
}

/// The name and type a query asks about (its first question), for the log.
pub fn question(bytes: &[u8]) -> Option<(String, u16)> {
    let m = Message::from_vec(bytes).ok()?;
    let q = m.queries().first()?;
    Some((q.name().to_ascii(), u16::from(q.query_type())))
}

/// A reply's outcome for the log: whether it answered (NOERROR) and the address it gave.
pub fn summary(reply_bytes: &[u8]) -> (bool, Option<Ipv4Addr>) {
    let Ok(m) = Message::from_vec(reply_bytes) else {
        return (false, None);
    };
    let addr = m.answers().iter().find_map(|r| match r.data() {
        RData::A(a) => Some(a.0),
        _ => None,
    });
    (m.response_code() == ResponseCode::NoError, addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Mode, Rule};
    use std::str::FromStr;

    fn query(name: &str, t: RecordType) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(4242)
            .set_message_type(MessageType::Query)
            .set_recursion_desired(true);
        m.add_query(Query::query(
            hickory_proto::rr::Name::from_str(name).unwrap(),
            t,
        ));
        m.to_vec().unwrap()
    }

    fn parsed(a: Answer) -> Message {
        match a {
            Answer::Reply(b) => Message::from_vec(&b).unwrap(),
            other => panic!("not a reply: {other:?}"),
        }
    }

    fn custom(hosts: &[&str]) -> Policy {
        Policy::new(Mode::Custom, hosts, &[] as &[&str], &[] as &[&str]).unwrap()
    }

    #[test]
    fn an_allowed_name_gets_a_stable_synthetic_address_and_others_nxdomain() {
        let p = custom(&["*.example.test"]);
        let mut pool = Pool::new(16);
        let (a, d) = answer(&query("api.example.test.", RecordType::A), &p, &mut pool);
        let m = parsed(a);
        assert_eq!(m.id(), 4242);
        assert_eq!(m.response_code(), ResponseCode::NoError);
        let RData::A(addr) = m.answers()[0].data() else {
            panic!("{m:?}")
        };
        assert_eq!(m.answers()[0].ttl(), TTL);
        assert_eq!(addr.octets()[..2], [198, 18]);
        assert!(d.unwrap().verdict.unwrap().allowed());
        let again = parsed(answer(&query("API.example.test.", RecordType::A), &p, &mut pool).0);
        assert_eq!(again.answers()[0].data(), m.answers()[0].data());
        let (no, d) = answer(&query("example.test.", RecordType::A), &p, &mut pool);
        assert_eq!(parsed(no).response_code(), ResponseCode::NXDomain);
        assert_eq!(d.unwrap().verdict, Some(Verdict::Deny(Rule::NotListed)));
        let deny = Policy::deny_all();
        assert_eq!(
            parsed(answer(&query("api.example.test.", RecordType::A), &deny, &mut pool).0)
                .response_code(),
            ResponseCode::NXDomain
        );
    }

    #[test]
    fn address_carrying_types_are_empty_and_others_go_to_the_host_resolver() {
        let p = custom(&["api.example.test"]);
        let mut pool = Pool::new(16);
        for t in [RecordType::AAAA, RecordType::HTTPS, RecordType::SVCB] {
            let m = parsed(answer(&query("api.example.test.", t), &p, &mut pool).0);
            assert_eq!(m.response_code(), ResponseCode::NoError, "{t}");
            assert!(m.answers().is_empty(), "{t}");
        }
        assert_eq!(
            answer(&query("api.example.test.", RecordType::TXT), &p, &mut pool).0,
            Answer::Forward {
                name: Name::parse("api.example.test").unwrap(),
                record_type: u16::from(RecordType::TXT)
            }
        );
        // Not for a refused name.
        let m = parsed(answer(&query("other.test.", RecordType::TXT), &p, &mut pool).0);
        assert_eq!(m.response_code(), ResponseCode::NXDomain);
    }

    #[test]
    fn ptr_answers_synthetic_addresses_only() {
        let p = custom(&["api.example.test"]);
        let mut pool = Pool::new(16);
        let addr = pool
            .address_of(&Name::parse("api.example.test").unwrap())
            .unwrap();
        let o = addr.octets();
        let rev = format!("{}.{}.{}.{}.in-addr.arpa.", o[3], o[2], o[1], o[0]);
        let m = parsed(answer(&query(&rev, RecordType::PTR), &p, &mut pool).0);
        let RData::PTR(target) = m.answers()[0].data() else {
            panic!("{m:?}")
        };
        assert_eq!(target.0.to_ascii(), "api.example.test.");
        let m = parsed(
            answer(
                &query("1.0.0.127.in-addr.arpa.", RecordType::PTR),
                &p,
                &mut pool,
            )
            .0,
        );
        assert_eq!(m.response_code(), ResponseCode::NXDomain);
    }

    #[test]
    fn garbage_and_responses_are_dropped_and_odd_queries_refused() {
        let p = custom(&["a.test"]);
        let mut pool = Pool::new(4);
        assert_eq!(answer(b"\x00\x01garbage", &p, &mut pool).0, Answer::Drop);
        let mut resp = Message::from_vec(&query("a.test.", RecordType::A)).unwrap();
        resp.set_message_type(MessageType::Response);
        assert_eq!(
            answer(&resp.to_vec().unwrap(), &p, &mut pool).0,
            Answer::Drop
        );
        let mut two = Message::from_vec(&query("a.test.", RecordType::A)).unwrap();
        two.add_query(Query::query(
            hickory_proto::rr::Name::from_str("b.test.").unwrap(),
            RecordType::A,
        ));
        assert_eq!(
            parsed(answer(&two.to_vec().unwrap(), &p, &mut pool).0).response_code(),
            ResponseCode::FormErr
        );
        assert!(pool.is_empty(), "nothing handed out for refused queries");
    }
}
