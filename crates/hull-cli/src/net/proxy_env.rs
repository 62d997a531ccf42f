//! The host's HTTP proxy, as the caller's environment names it, for the gateway's upstream
//! connections: `HULL_NET_PROXY` (hull's own; `none` turns a proxy off), else `HTTPS_PROXY`,
//! `https_proxy`, `ALL_PROXY`, `all_proxy`, as curl, pip and Go read them; `NO_PROXY`'s
//! addresses and CIDRs are dialled directly (its names cannot apply: the gateway dials the
//! addresses it judged, see `hull_net::proxy`). The proxy's name is resolved here, before the
//! gateway confines itself.

use std::net::ToSocketAddrs;

use super::wire::ProxyStart;

/// The variables read, in order; the first set one decides.
const VARS: &[&str] = &[
    "HULL_NET_PROXY",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// The proxy of this process's environment (None: dial directly).
pub fn from_env() -> Result<Option<ProxyStart>, String> {
    let Some((var, url)) = VARS
        .iter()
        .find_map(|v| std::env::var(v).ok().map(|u| (*v, u)))
    else {
        return Ok(None);
    };
    let no_proxy = std::env::var("NO_PROXY")
        .or_else(|_| std::env::var("no_proxy"))
        .unwrap_or_default();
    parse(var, url.trim(), &no_proxy)
}

/// `url` (from `var`) and a `NO_PROXY` list as a proxy, or None for none. Errors never quote
/// the URL whole: its user part may hold a password.
fn parse(var: &str, url: &str, no_proxy: &str) -> Result<Option<ProxyStart>, String> {
    if url.is_empty() || (var == "HULL_NET_PROXY" && url == "none") {
        return Ok(None);
    }
    if no_proxy.split(',').any(|e| e.trim() == "*") {
        return Ok(None);
    }
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "{var}: `{scheme}://` proxies are not supported; give an HTTP proxy (http://HOST:PORT), or {} to dial directly",
                if var == "HULL_NET_PROXY" { "`none`" } else { "HULL_NET_PROXY=none" }
            ))
        }
        None => url,
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let (credentials, hostport) = match authority.rsplit_once('@') {
        Some((user, hp)) => (Some(percent_decode(user)), hp),
        None => (None, authority),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => {
            let port = p
                .parse::<u16>()
                .map_err(|_| format!("{var}: `{p}` after the proxy host is not a port number"))?;
            (h, port)
        }
        _ => (hostport, 80),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!(
            "{var} names no proxy host; expected http://HOST:PORT"
        ));
    }
    let addr = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{var}: cannot resolve the proxy `{host}`: {e}"))?
        .next()
        .ok_or_else(|| format!("{var}: the proxy `{host}` has no address"))?;
    let direct = no_proxy
        .split(',')
        .filter_map(hull_net::proxy::direct_entry)
        .map(|n| n.to_string())
        .collect();
    Ok(Some(ProxyStart {
        addr,
        credentials,
        direct,
    }))
}

/// `%XX` escapes of a URL's user part decoded (a password may hold `@` or `:` that way).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|&c| hex(c)),
            b.get(i + 2).and_then(|&c| hex(c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn proxy_urls_as_curl_and_pip_take_them() {
        let p = parse("HTTPS_PROXY", "http://me:p%40ss@127.0.0.1:3128/", "")
            .unwrap()
            .unwrap();
        assert_eq!(p.addr, "127.0.0.1:3128".parse().unwrap());
        assert_eq!(p.credentials.as_deref(), Some("me:p@ss"));
        let p = parse(
            "https_proxy",
            "127.0.0.1",
            "localhost, 10.0.0.0/8,192.0.2.7,.corp",
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.addr, "127.0.0.1:80".parse().unwrap());
        assert_eq!(
            p.direct,
            vec!["10.0.0.0/8".to_string(), "192.0.2.7/32".to_string()]
        );
        let p = parse("ALL_PROXY", "http://[::1]:8080", "")
            .unwrap()
            .unwrap();
        assert_eq!(p.addr, "[::1]:8080".parse().unwrap());
        assert!(parse("HULL_NET_PROXY", "none", "").unwrap().is_none());
        assert!(parse("HTTPS_PROXY", "http://127.0.0.1:1", "*")
            .unwrap()
            .is_none());
        let e = parse("HTTPS_PROXY", "socks5://127.0.0.1:1080", "").unwrap_err();
        assert!(
            e.starts_with("HTTPS_PROXY: `socks5://`") && e.contains("HULL_NET_PROXY=none"),
            "{e}"
        );
        let e = parse("HTTPS_PROXY", "http://127.0.0.1:x", "").unwrap_err();
        assert!(e.contains("not a port"), "{e}");
    }
}
