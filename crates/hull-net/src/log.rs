//! The gateway's connection log: one JSON line per DNS decision and per connection, naming the
//! verdict and the rule that decided it (what a user reads to learn why `pip install` failed).
//! Records hold names, addresses, counts and times only: there is no field a request's headers
//! or a secret could reach, so brokering can never leak one here.

use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

use crate::ingress::Refusal;
use crate::policy::{Rule, Verdict};

/// A verdict as the log spells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// `allow` or `deny`.
    pub verdict: &'static str,
    /// The rule, in words (`allowed host *.pypi.org`, `always denied: loopback`, ...).
    pub rule: String,
}

impl From<&Verdict> for Decision {
    fn from(v: &Verdict) -> Decision {
        Decision {
            verdict: if v.allowed() { "allow" } else { "deny" },
            rule: v.rule().to_string(),
        }
    }
}

impl From<&Refusal> for Decision {
    fn from(r: &Refusal) -> Decision {
        Decision {
            verdict: "deny",
            rule: refusal_words(r),
        }
    }
}

fn refusal_words(r: &Refusal) -> String {
    match r {
        Refusal::Malformed => "malformed frame".into(),
        Refusal::Spoofed => "not from the box's own address".into(),
        Refusal::Fragment => "IP fragment".into(),
        Refusal::Ipv6 => "IPv6 (no IPv6 in a box)".into(),
        Refusal::Protocol(p) => format!("IP protocol {p}"),
        Refusal::Icmp => "ICMP beyond the gateway".into(),
        Refusal::DnsOverTls => "DNS over TLS (the gateway answers plain DNS)".into(),
        Refusal::Quic => "QUIC (clients fall back to TCP)".into(),
        Refusal::LocalDiscovery => "mDNS/LLMNR".into(),
        Refusal::Udp => "UDP other than DNS".into(),
        Refusal::UnknownSynthetic(a) => format!("{a} was never handed out by the gateway's DNS"),
        Refusal::Policy(rule) => Rule::to_string(rule),
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A DNS query the gateway answered.
    Dns {
        /// Milliseconds since the Unix epoch.
        at_ms: u64,
        name: String,
        /// The query type's number (1 A, 28 AAAA, ...).
        record_type: u16,
        #[serde(flatten)]
        decision: Decision,
        /// The synthetic address given, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        answer: Option<IpAddr>,
    },
    /// A connection, logged when it is refused or when it ends.
    Flow {
        at_ms: u64,
        /// `tcp` (v1 forwards TCP only).
        proto: &'static str,
        /// The name the box connected to (through its synthetic address), if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// Where the box sent it (a literal or a synthetic address).
        dst: SocketAddr,
        /// The upstream address dialled, when one was.
        #[serde(skip_serializing_if = "Option::is_none")]
        upstream: Option<SocketAddr>,
        #[serde(flatten)]
        decision: Decision,
        bytes_out: u64,
        bytes_in: u64,
        duration_ms: u64,
        /// Why it ended (`closed`, `reset by upstream`, `refused`, `cap`, ...).
        end: String,
    },
    /// Records left out because the box made them faster than the log's rate
    /// ([`crate::limit::LOG_PER_S`], for `allow` and `deny` records each): written before the
    /// next record of that kind that is kept, or when the gateway ends.
    Suppressed {
        at_ms: u64,
        records: u64,
        /// Whose: `allow` or `deny` records (each kind has its own rate, so refusals in a loop
        /// never hide the connections that were let through).
        verdict: &'static str,
    },
}

impl Record {
    /// The record as one JSON line (with its newline).
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|e| {
            format!("{{\"kind\":\"error\",\"message\":\"unloggable record: {e}\"}}")
        });
        s.push('\n');
        s
    }
}

/// Where a gateway writes its records (a file of JSON lines, a channel to the serve stream, a
/// test's receiver). Writing must not block for long: it runs on the gateway's event loop.
pub trait LogSink: Send {
    fn write(&mut self, record: &Record);
}

/// JSON lines into any writer; a failed write is dropped (the log never stops the network).
#[derive(Debug)]
pub struct Lines<W>(pub W);

impl<W: std::io::Write + Send> LogSink for Lines<W> {
    fn write(&mut self, record: &Record) {
        let _ = self.0.write_all(record.line().as_bytes());
    }
}

impl LogSink for std::sync::mpsc::Sender<Record> {
    fn write(&mut self, record: &Record) {
        let _ = self.send(record.clone());
    }
}

impl LogSink for tokio::sync::mpsc::UnboundedSender<Record> {
    fn write(&mut self, record: &Record) {
        let _ = self.send(record.clone());
    }
}

/// A sink that keeps at most a burst and then a steady rate of records, counting the rest into
/// one `suppressed` record ([`crate::limit`]).
pub struct Limited {
    inner: Box<dyn LogSink>,
    /// The rate of `allow` records and of the rest (`deny`), each with what it left out.
    allow: (crate::limit::Bucket, u64),
    deny: (crate::limit::Bucket, u64),
}

impl std::fmt::Debug for Limited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limited")
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .finish_non_exhaustive()
    }
}

impl Limited {
    pub fn new(inner: Box<dyn LogSink>, per_s: u32, burst: u32) -> Limited {
        let now = std::time::Instant::now();
        Limited {
            inner,
            allow: (crate::limit::Bucket::new(per_s, burst, now), 0),
            deny: (crate::limit::Bucket::new(per_s, burst, now), 0),
        }
    }

    fn write_at(&mut self, record: &Record, now: std::time::Instant) {
        let allowed = match record {
            Record::Dns { decision, .. } | Record::Flow { decision, .. } => {
                decision.verdict == "allow"
            }
            Record::Suppressed { verdict, .. } => *verdict == "allow",
        };
        let (bucket, left_out) = if allowed {
            &mut self.allow
        } else {
            &mut self.deny
        };
        if !bucket.take(now) {
            *left_out += 1;
            return;
        }
        let n = std::mem::take(left_out);
        self.say_left_out(n, allowed);
        self.inner.write(record);
    }

    fn say_left_out(&mut self, records: u64, allowed: bool) {
        if records > 0 {
            self.inner.write(&Record::Suppressed {
                at_ms: now_ms(),
                records,
                verdict: if allowed { "allow" } else { "deny" },
            });
        }
    }
}

impl LogSink for Limited {
    fn write(&mut self, record: &Record) {
        self.write_at(record, std::time::Instant::now());
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let (a, d) = (
            std::mem::take(&mut self.allow.1),
            std::mem::take(&mut self.deny.1),
        );
        self.say_left_out(a, true);
        self.say_left_out(d, false);
    }
}

/// Milliseconds since the Unix epoch, for a record's `at_ms`.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::Class;
    use crate::name::HostPattern;
    use serde_json::Value;

    #[test]
    fn past_the_rate_records_are_counted_and_the_count_is_written() {
        use std::time::{Duration, Instant};
        let (tx, rx) = std::sync::mpsc::channel();
        let mut l = Limited::new(Box::new(tx), 10, 3);
        let t0 = Instant::now();
        let rec = |n: u64, verdict: &'static str| Record::Dns {
            at_ms: n,
            name: format!("n{n}"),
            record_type: 1,
            decision: Decision {
                verdict,
                rule: "test".into(),
            },
            answer: None,
        };
        for n in 0..10 {
            l.write_at(&rec(n, "deny"), t0);
        }
        // Refusals in a loop use up their own rate only: an allowed record is still kept.
        l.write_at(&rec(50, "allow"), t0);
        // A burst of 3 kept, 7 counted; 100 ms later one more is kept after the count.
        l.write_at(&rec(99, "deny"), t0 + Duration::from_millis(100));
        drop(l);
        let got: Vec<Record> = rx.try_iter().collect();
        let kept: Vec<u64> = got
            .iter()
            .map(|r| match r {
                Record::Dns { at_ms, .. } => *at_ms,
                Record::Suppressed { records, .. } => 1000 + records,
                Record::Flow { .. } => u64::MAX,
            })
            .collect();
        assert_eq!(kept, vec![0, 1, 2, 50, 1007, 99]);
        let v: Value = serde_json::from_str(&got[4].line()).unwrap();
        assert_eq!(
            (
                v["kind"].as_str(),
                v["records"].as_u64(),
                v["verdict"].as_str()
            ),
            (Some("suppressed"), Some(7), Some("deny"))
        );
    }

    #[test]
    fn a_refused_flow_names_the_rule_that_decided() {
        let r = Record::Flow {
            at_ms: 1,
            proto: "tcp",
            name: Some("api.example.test".into()),
            dst: "198.18.0.1:443".parse().unwrap(),
            upstream: None,
            decision: Decision::from(&Refusal::Policy(Rule::OnlyDeniedAnswers(Box::new(
                Rule::AlwaysDenied(Class::Metadata),
            )))),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            end: "refused".into(),
        };
        let line = r.line();
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["kind"], "flow");
        assert_eq!(v["verdict"], "deny");
        assert_eq!(
            v["rule"],
            "resolved only to denied addresses (always denied: cloud metadata)"
        );
        assert_eq!(v["dst"], "198.18.0.1:443");
        assert!(v.get("upstream").is_none());
    }

    #[test]
    fn dns_decisions_carry_the_verdict_and_the_answer() {
        let allowed = Verdict::Allow(Rule::AllowedHost(HostPattern::parse("*.pypi.org").unwrap()));
        let r = Record::Dns {
            at_ms: 2,
            name: "files.pypi.org".into(),
            record_type: 1,
            decision: Decision::from(&allowed),
            answer: Some("198.18.0.7".parse().unwrap()),
        };
        let v: Value = serde_json::from_str(&r.line()).unwrap();
        assert_eq!(
            (
                v["kind"].as_str(),
                v["verdict"].as_str(),
                v["rule"].as_str(),
                v["answer"].as_str()
            ),
            (
                Some("dns"),
                Some("allow"),
                Some("allowed host *.pypi.org"),
                Some("198.18.0.7")
            )
        );
        let spoof = Decision::from(&Refusal::UnknownSynthetic("198.19.0.9".parse().unwrap()));
        assert_eq!(
            spoof.rule,
            "198.19.0.9 was never handed out by the gateway's DNS"
        );
    }
}
