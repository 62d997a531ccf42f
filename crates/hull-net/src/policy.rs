//! The egress policy and its verdicts. A box's gateway asks it three questions: may the box
//! resolve this name (DNS time: an allowed name gets a synthetic address, any other NXDOMAIN),
//! may it connect to this literal address (CIDR rules, then the always-denied classes, then the
//! mode), and which of a name's real answers may be dialled when the box connects to the name
//! (the name judged again against the policy of that moment, then each answer through the
//! CIDR rules and classes: DNS rebinding and SSRF to private or host addresses end here).
//! Denied CIDRs win over everything; an allowed CIDR is the only way into an always-denied
//! class. Every verdict carries the rule that decided it, for the connection log.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::class::{self, Class};
use crate::name::{HostPattern, Name, NameError};

/// The policy's base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No name resolves, no address is reachable.
    DenyAll,
    /// Every name, and every address outside the always-denied classes: the public internet.
    AllowAll,
    /// The allowed hosts and allowed CIDRs only.
    Custom,
}

impl Mode {
    /// The mode as the CLI and SDKs spell it (`deny-all`, `allow-all`, `custom`).
    pub fn parse(s: &str) -> Result<Mode, PolicyError> {
        match s {
            "deny-all" => Ok(Mode::DenyAll),
            "allow-all" => Ok(Mode::AllowAll),
            "custom" => Ok(Mode::Custom),
            other => Err(PolicyError::UnknownMode {
                given: other.to_string(),
            }),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::DenyAll => "deny-all",
            Mode::AllowAll => "allow-all",
            Mode::Custom => "custom",
        })
    }
}

/// A policy that cannot be built; each names the entry as the caller gave it.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown network mode `{given}` (deny-all, allow-all or custom)")]
    UnknownMode { given: String },
    #[error("allowed host `{given}` is not a host name or `*.` pattern")]
    BadHost {
        given: String,
        #[source]
        source: NameError,
    },
    #[error("CIDR `{given}` is not an address or address/prefix (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.7`)")]
    BadCidr {
        given: String,
        #[source]
        source: ipnet::AddrParseError,
    },
    #[error("deny-all allows nothing: drop the allowed hosts and CIDRs, or use custom")]
    DenyAllWithAllowances,
    #[error("allowed hosts need the custom mode (allow-all already allows every name)")]
    HostsOutsideCustom,
}

/// What decided a verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    DeniedCidr(IpNet),
    AllowedCidr(IpNet),
    AllowedHost(HostPattern),
    AlwaysDenied(Class),
    /// The deny-all mode.
    DenyAll,
    /// The allow-all mode (a public address, or any name).
    AllowAll,
    /// Custom mode: the name or address is in no allowed host or CIDR.
    NotListed,
    /// An allowed name resolved, but only to addresses the policy denies (the first reason).
    OnlyDeniedAnswers(Box<Rule>),
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::DeniedCidr(n) => write!(f, "denied CIDR {n}"),
            Rule::AllowedCidr(n) => write!(f, "allowed CIDR {n}"),
            Rule::AllowedHost(p) => write!(f, "allowed host {p}"),
            Rule::AlwaysDenied(c) => write!(f, "always denied: {c}"),
            Rule::DenyAll => f.write_str("mode deny-all"),
            Rule::AllowAll => f.write_str("mode allow-all"),
            Rule::NotListed => f.write_str("not an allowed host or CIDR"),
            Rule::OnlyDeniedAnswers(r) => write!(f, "resolved only to denied addresses ({r})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow(Rule),
    Deny(Rule),
}

impl Verdict {
    pub fn allowed(&self) -> bool {
        matches!(self, Verdict::Allow(_))
    }

    pub fn rule(&self) -> &Rule {
        match self {
            Verdict::Allow(r) | Verdict::Deny(r) => r,
        }
    }
}

/// A box's egress policy (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    mode: Mode,
    hosts: Vec<HostPattern>,
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

fn cidr(given: &str) -> Result<IpNet, PolicyError> {
    let bad = |source| PolicyError::BadCidr {
        given: given.to_string(),
        source,
    };
    match given.parse::<IpNet>() {
        Ok(n) => Ok(n.trunc()),
        Err(e) => given.parse::<IpAddr>().map(IpNet::from).map_err(|_| bad(e)),
    }
}

impl Policy {
    pub fn deny_all() -> Policy {
        Policy {
            mode: Mode::DenyAll,
            hosts: Vec::new(),
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }

    /// A policy from its parts as the caller spelled them; hosts are only for `Custom`, and
    /// `DenyAll` takes no allowance (a contradiction is refused, not resolved silently).
    pub fn new(
        mode: Mode,
        hosts: &[impl AsRef<str>],
        allow_cidrs: &[impl AsRef<str>],
        deny_cidrs: &[impl AsRef<str>],
    ) -> Result<Policy, PolicyError> {
        let hosts = hosts
            .iter()
            .map(|h| {
                HostPattern::parse(h.as_ref()).map_err(|source| PolicyError::BadHost {
                    given: h.as_ref().to_string(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let allow = allow_cidrs
            .iter()
            .map(|c| cidr(c.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let deny = deny_cidrs
            .iter()
            .map(|c| cidr(c.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        match mode {
            Mode::DenyAll if !hosts.is_empty() || !allow.is_empty() => {
                return Err(PolicyError::DenyAllWithAllowances)
            }
            Mode::AllowAll if !hosts.is_empty() => return Err(PolicyError::HostsOutsideCustom),
            _ => {}
        }
        Ok(Policy {
            mode,
            hosts,
            allow,
            deny,
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// DNS time: may the box resolve `name`?
    pub fn judge_name(&self, name: &Name) -> Verdict {
        match self.mode {
            Mode::DenyAll => Verdict::Deny(Rule::DenyAll),
            Mode::AllowAll => Verdict::Allow(Rule::AllowAll),
            Mode::Custom => match self.hosts.iter().find(|p| p.matches(name)) {
                Some(p) => Verdict::Allow(Rule::AllowedHost(p.clone())),
                None => Verdict::Deny(Rule::NotListed),
            },
        }
    }

    /// The CIDR rules and the classes, in their order; None when neither decides.
    fn by_address(&self, addr: IpAddr, host: &[IpAddr]) -> Option<Verdict> {
        let inner = class::judged(addr);
        let hit = |n: &&IpNet| n.contains(&addr) || n.contains(&inner);
        if let Some(n) = self.deny.iter().find(hit) {
            return Some(Verdict::Deny(Rule::DeniedCidr(*n)));
        }
        if let Some(n) = self.allow.iter().find(hit) {
            return Some(Verdict::Allow(Rule::AllowedCidr(*n)));
        }
        class::classify(addr, host).map(|c| Verdict::Deny(Rule::AlwaysDenied(c)))
    }

    /// A connection to a literal address (the box did not get it from the gateway's DNS);
    /// `host` is the host's own interface addresses.
    pub fn judge_literal(&self, addr: IpAddr, host: &[IpAddr]) -> Verdict {
        self.by_address(addr, host).unwrap_or(match self.mode {
            Mode::DenyAll => Verdict::Deny(Rule::DenyAll),
            Mode::AllowAll => Verdict::Allow(Rule::AllowAll),
            Mode::Custom => Verdict::Deny(Rule::NotListed),
        })
    }

    /// A connection to `name` (through its synthetic address): the name judged again, then
    /// its host-side answers filtered. The answers left are what may be dialled, in order.
    pub fn judge_connect(
        &self,
        name: &Name,
        answers: &[IpAddr],
        host: &[IpAddr],
    ) -> Result<(Rule, Vec<IpAddr>), Verdict> {
        let rule = match self.judge_name(name) {
            Verdict::Allow(rule) => rule,
            denied => return Err(denied),
        };
        let mut first_denial = None;
        let mut left = Vec::new();
        for a in answers {
            match self.by_address(*a, host) {
                Some(Verdict::Deny(r)) => {
                    first_denial.get_or_insert(r);
                }
                _ => left.push(*a),
            }
        }
        if left.is_empty() {
            let why = first_denial.unwrap_or(Rule::NotListed);
            return Err(Verdict::Deny(Rule::OnlyDeniedAnswers(Box::new(why))));
        }
        Ok((rule, left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [&str; 0] = [];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn name(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    fn custom(hosts: &[&str], allow: &[&str], deny: &[&str]) -> Policy {
        Policy::new(Mode::Custom, hosts, allow, deny).unwrap()
    }

    #[test]
    fn deny_all_resolves_nothing_and_reaches_nothing() {
        let p = Policy::deny_all();
        assert_eq!(
            p.judge_name(&name("example.com")),
            Verdict::Deny(Rule::DenyAll)
        );
        assert_eq!(
            p.judge_literal(ip("1.1.1.1"), &[]),
            Verdict::Deny(Rule::DenyAll)
        );
        assert_eq!(
            p.judge_literal(ip("127.0.0.1"), &[]),
            Verdict::Deny(Rule::AlwaysDenied(Class::Loopback))
        );
        assert!(p
            .judge_connect(&name("example.com"), &[ip("1.1.1.1")], &[])
            .is_err());
    }

    #[test]
    fn allow_all_reaches_public_addresses_only() {
        let p = Policy::new(Mode::AllowAll, &NONE, &NONE, &NONE).unwrap();
        assert_eq!(
            p.judge_literal(ip("1.1.1.1"), &[]),
            Verdict::Allow(Rule::AllowAll)
        );
        for denied in [
            "127.0.0.1",
            "10.1.2.3",
            "169.254.169.254",
            "::1",
            "::ffff:192.168.0.1",
            "fe80::1",
        ] {
            assert!(!p.judge_literal(ip(denied), &[]).allowed(), "{denied}");
        }
        let host = [ip("93.184.215.14")];
        assert_eq!(
            p.judge_literal(ip("93.184.215.14"), &host),
            Verdict::Deny(Rule::AlwaysDenied(Class::HostInterface))
        );
        assert!(p.judge_name(&name("anything.example")).allowed());
    }

    #[test]
    fn custom_allows_listed_names_and_cidrs_only() {
        let p = custom(&["api.example.com", "*.pypi.org"], &["192.0.2.0/28"], &NONE);
        assert_eq!(
            p.judge_name(&name("API.example.com.")),
            Verdict::Allow(Rule::AllowedHost(
                HostPattern::parse("api.example.com").unwrap()
            ))
        );
        assert!(p.judge_name(&name("files.pypi.org")).allowed());
        assert_eq!(
            p.judge_name(&name("pypi.org")),
            Verdict::Deny(Rule::NotListed)
        );
        assert_eq!(
            p.judge_name(&name("evilpypi.org")),
            Verdict::Deny(Rule::NotListed)
        );
        assert_eq!(
            p.judge_name(&name("example.com")),
            Verdict::Deny(Rule::NotListed)
        );
        // An allowed CIDR opens a documentation block; a public literal outside it is not listed.
        assert!(p.judge_literal(ip("192.0.2.9"), &[]).allowed());
        assert_eq!(
            p.judge_literal(ip("192.0.2.17"), &[]),
            Verdict::Deny(Rule::AlwaysDenied(Class::Documentation))
        );
        assert_eq!(
            p.judge_literal(ip("1.1.1.1"), &[]),
            Verdict::Deny(Rule::NotListed)
        );
    }

    #[test]
    fn denied_cidrs_win_over_allowed_names_and_allowed_cidrs() {
        let p = custom(&["api.example.com"], &["8.8.0.0/16"], &["8.8.8.0/24"]);
        assert_eq!(
            p.judge_literal(ip("8.8.8.8"), &[]),
            Verdict::Deny(Rule::DeniedCidr("8.8.8.0/24".parse().unwrap()))
        );
        assert!(p.judge_literal(ip("8.8.4.4"), &[]).allowed());
        // The allowed name resolving into the denied block: only the other answer is dialled.
        let (rule, left) = p
            .judge_connect(
                &name("api.example.com"),
                &[ip("8.8.8.8"), ip("9.9.9.9")],
                &[],
            )
            .unwrap();
        assert_eq!(
            rule,
            Rule::AllowedHost(HostPattern::parse("api.example.com").unwrap())
        );
        assert_eq!(left, vec![ip("9.9.9.9")]);
        // An IPv6 form of a denied IPv4 address is denied as it.
        assert!(!p.judge_literal(ip("::ffff:8.8.8.8"), &[]).allowed());
    }

    #[test]
    fn an_allowed_name_resolving_to_private_or_host_addresses_is_refused() {
        let p = custom(&["api.example.com"], &NONE, &NONE);
        let host = [ip("93.184.215.14")];
        for (answer, class) in [
            ("127.0.0.1", Class::Loopback),
            ("10.0.0.5", Class::Private),
            ("169.254.169.254", Class::Metadata),
            ("::ffff:127.0.0.1", Class::Loopback),
            ("64:ff9b::7f00:1", Class::Loopback),
            ("93.184.215.14", Class::HostInterface),
        ] {
            assert_eq!(
                p.judge_connect(&name("api.example.com"), &[ip(answer)], &host),
                Err(Verdict::Deny(Rule::OnlyDeniedAnswers(Box::new(
                    Rule::AlwaysDenied(class)
                )))),
                "{answer}"
            );
        }
        // An allowed CIDR naming the private answer lets it through.
        let p = custom(&["api.example.com"], &["10.0.0.0/24"], &NONE);
        assert_eq!(
            p.judge_connect(&name("api.example.com"), &[ip("10.0.0.5")], &[])
                .unwrap()
                .1,
            vec![ip("10.0.0.5")]
        );
    }

    #[test]
    fn a_name_no_longer_allowed_is_refused_at_connect_time() {
        let before = custom(&["api.example.com"], &NONE, &NONE);
        assert!(before
            .judge_connect(&name("api.example.com"), &[ip("1.1.1.1")], &[])
            .is_ok());
        let after = custom(&["other.example.com"], &NONE, &NONE);
        assert_eq!(
            after.judge_connect(&name("api.example.com"), &[ip("1.1.1.1")], &[]),
            Err(Verdict::Deny(Rule::NotListed))
        );
    }

    #[test]
    fn bad_policies_are_refused_naming_the_entry() {
        let e = Policy::new(Mode::Custom, &["api.example.com", "a..b"], &NONE, &NONE).unwrap_err();
        assert!(
            matches!(&e, PolicyError::BadHost { given, .. } if given == "a..b"),
            "{e:?}"
        );
        let e = Policy::new(Mode::Custom, &NONE, &["10.0.0.0/33"], &NONE).unwrap_err();
        assert!(
            matches!(&e, PolicyError::BadCidr { given, .. } if given == "10.0.0.0/33"),
            "{e:?}"
        );
        assert!(Policy::new(Mode::Custom, &NONE, &["10.1.2.3"], &NONE).is_ok());
        assert!(matches!(
            Policy::new(Mode::DenyAll, &["a.com"], &NONE, &NONE),
            Err(PolicyError::DenyAllWithAllowances)
        ));
        assert!(matches!(
            Policy::new(Mode::AllowAll, &["a.com"], &NONE, &NONE),
            Err(PolicyError::HostsOutsideCustom)
        ));
        assert!(matches!(
            Mode::parse("allow_all"),
            Err(PolicyError::UnknownMode { .. })
        ));
        assert_eq!(Mode::parse("custom").unwrap(), Mode::Custom);
    }
}
