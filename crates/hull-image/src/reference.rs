//! Image references as `hull pull` takes them: `[host[:port]/]repo[:tag][@sha256:<hex>]`, with
//! Docker Hub's defaults (`busybox` is `docker.io/library/busybox:latest`), and the transport
//! policy: which registries may be spoken to over plain http.

use std::net::IpAddr;

use crate::oci::Digest;

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `host[:port]` as written (`docker.io` when none was).
    pub registry: String,
    /// The repository path, e.g. `library/busybox`.
    pub repository: String,
    /// The tag; `latest` when neither a tag nor a digest was given.
    pub tag: Option<String>,
    /// A pinned manifest digest: the manifest's bytes must hash to it.
    pub digest: Option<Digest>,
}

#[derive(Debug, thiserror::Error)]
#[error("image reference `{reference}` is not valid: {why} (write it as [HOST[:PORT]/]REPO[:TAG][@sha256:HEX], e.g. 127.0.0.1:5000/busybox:1)")]
pub struct ReferenceError {
    pub reference: String,
    pub why: String,
}

pub(crate) const DOCKER_HUB: &str = "docker.io";

impl Reference {
    pub fn parse(text: &str) -> Result<Reference, ReferenceError> {
        let bad = |why: &str| ReferenceError {
            reference: text.into(),
            why: why.into(),
        };
        if text.is_empty() || text.len() > 512 {
            return Err(bad("it is empty or longer than 512 bytes"));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((r, d)) => (
                r,
                Some(Digest::parse(d).ok_or_else(|| {
                    bad("the digest must be sha256: and 64 lowercase hex digits")
                })?),
            ),
            None => (text, None),
        };
        // A tag is a `:` after the last `/` (a `:` before it is a port).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(t) = tag {
            let ok = !t.is_empty()
                && t.len() <= 128
                && !t.starts_with(['.', '-'])
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
            if !ok {
                return Err(bad(
                    "a tag is 1-128 of letters, digits, _ . - (not starting with . or -)",
                ));
            }
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains(['.', ':']) || first == "localhost" || first.starts_with('[') =>
            {
                (first.to_string(), path.to_string())
            }
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        if !valid_host(&registry) {
            return Err(bad("the registry host is not a host name, IPv4 address or [IPv6] address with an optional :port"));
        }
        let repository = if (registry == DOCKER_HUB || registry == "index.docker.io")
            && !repository.contains('/')
        {
            format!("library/{repository}")
        } else {
            repository
        };
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
                && c.as_bytes()[0].is_ascii_alphanumeric()
                && c.as_bytes()[c.len() - 1].is_ascii_alphanumeric()
        };
        if repository.len() > 255 || !repository.split('/').all(component_ok) {
            return Err(bad(
                "a repository is lowercase letters, digits and . _ - between slashes",
            ));
        }
        let tag = match (tag, &digest) {
            (Some(t), _) => Some(t.to_string()),
            (None, None) => Some("latest".into()),
            (None, Some(_)) => None,
        };
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// The host:port requests go to (Docker Hub's API lives at registry-1.docker.io).
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB || self.registry == "index.docker.io" {
            "registry-1.docker.io"
        } else {
            &self.registry
        }
    }

    /// What to ask the registry for: the digest if pinned, else the tag.
    pub fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".into(),
        }
    }

    /// The local name a pull is stored under by default: the reference as written, with
    /// `:latest` added when it had neither tag nor digest.
    pub fn local_name(&self, as_written: &str) -> String {
        if self.digest.is_none()
            && !as_written[as_written.rfind('/').map_or(0, |i| i + 1)..].contains(':')
        {
            format!("{as_written}:latest")
        } else {
            as_written.to_string()
        }
    }
}

/// `host`, `host:port`, `1.2.3.4:5`, `[::1]:5000`.
fn valid_host(h: &str) -> bool {
    let (host, port) = split_port(h);
    let port_ok = port.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u16>().is_ok()
    });
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !l.starts_with('-')
            })
    };
    port_ok && host_ok
}

/// Splits `host:port` (IPv6 in brackets) into the host without brackets' contents kept as
/// written, and the port.
fn split_port(h: &str) -> (&str, Option<&str>) {
    if h.starts_with('[') {
        match h.find(']') {
            Some(i) => (&h[..=i], h[i + 1..].strip_prefix(':')),
            None => (h, None),
        }
    } else {
        match h.rsplit_once(':') {
            Some((a, p)) => (a, Some(p)),
            None => (h, None),
        }
    }
}

/// The host part of `host[:port]`, brackets removed.
pub fn host_only(h: &str) -> &str {
    let (host, _) = split_port(h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// True for 127.0.0.0/8, ::1 and `localhost`: addresses that never leave this machine.
pub fn is_loopback(registry: &str) -> bool {
    let host = host_only(registry);
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// http or https for a registry. Plain http is used for loopback registries (their traffic
/// never leaves the machine) and for hosts named with `--insecure-registry`; everything else is
/// https with certificate verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn for_registry(registry: &str, insecure: &[String]) -> Scheme {
        let named = insecure.iter().any(|i| {
            i.eq_ignore_ascii_case(registry)
                || (!i.contains(':') || i.starts_with('[') && !i.contains("]:"))
                    && host_only(i).eq_ignore_ascii_case(host_only(registry))
        });
        if is_loopback(registry) || named {
            Scheme::Http
        } else {
            Scheme::Https
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Checks one `--insecure-registry` value: a host with an optional port, nothing else.
pub fn check_insecure_arg(value: &str) -> Result<(), String> {
    if valid_host(value) {
        Ok(())
    } else {
        Err(format!("--insecure-registry `{value}`: give a registry host with an optional port, e.g. 127.0.0.1:5000 or myregistry.lan:5000 (no scheme, no path)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Reference {
        Reference::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn docker_hub_defaults() {
        let r = p("busybox");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("docker.io", "library/busybox", Some("latest"))
        );
        assert_eq!(r.api_host(), "registry-1.docker.io");
        assert_eq!(r.local_name("busybox"), "busybox:latest");
        let r = p("someone/tool:1.2");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("docker.io", "someone/tool", Some("1.2"))
        );
    }

    #[test]
    fn hosts_ports_tags_digests() {
        let r = p("127.0.0.1:5000/a/b:v1");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5000", "a/b", Some("v1"))
        );
        let r = p("localhost/x");
        assert_eq!(
            (r.registry.as_str(), r.tag.as_deref()),
            ("localhost", Some("latest"))
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let r = p(&format!("[::1]:5000/x@{d}"));
        assert_eq!(
            (r.registry.as_str(), r.tag.as_deref(), r.manifest_ref()),
            ("[::1]:5000", None, d.clone())
        );
        assert_eq!(
            r.local_name(&format!("[::1]:5000/x@{d}")),
            format!("[::1]:5000/x@{d}")
        );
        let r = p(&format!("reg.example:443/x:t@{d}"));
        assert_eq!((r.tag.as_deref(), r.manifest_ref()), (Some("t"), d));
    }

    #[test]
    fn bad_references_are_refused() {
        for bad in [
            "",
            "UPPER/case",
            "x:",
            "x@sha256:abc",
            "x@md5:00",
            "a//b",
            "-x",
            "x:-t",
            "host:99999/x",
            "127.0.0.1:5000/../etc",
            "x y",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn plain_http_only_for_loopback_or_named_hosts() {
        let none: Vec<String> = Vec::new();
        for lo in [
            "127.0.0.1:5000",
            "127.8.9.10",
            "localhost:5000",
            "[::1]:5000",
        ] {
            assert_eq!(Scheme::for_registry(lo, &none), Scheme::Http, "{lo}");
        }
        for remote in [
            "10.0.0.1:5000",
            "192.168.1.2",
            "registry.example",
            "[fe80::1]:5000",
            "docker.io",
            "127.0.0.1.example",
        ] {
            assert_eq!(
                Scheme::for_registry(remote, &none),
                Scheme::Https,
                "{remote}"
            );
        }
        let named = vec!["10.0.0.1:5000".to_string(), "registry.lan".to_string()];
        assert_eq!(Scheme::for_registry("10.0.0.1:5000", &named), Scheme::Http);
        assert_eq!(
            Scheme::for_registry("10.0.0.1:6000", &named),
            Scheme::Https,
            "a port-qualified name covers that port only"
        );
        assert_eq!(
            Scheme::for_registry("registry.lan:5000", &named),
            Scheme::Http,
            "a bare host covers every port"
        );
        assert_eq!(Scheme::for_registry("other.lan", &named), Scheme::Https);
        assert!(check_insecure_arg("http://10.0.0.1").is_err());
        assert!(check_insecure_arg("10.0.0.1:5000/x").is_err());
        assert!(check_insecure_arg("10.0.0.1:5000").is_ok());
    }
}
