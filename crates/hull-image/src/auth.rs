//! Registry credentials and authentication challenges.
//!
//! Credentials are read from `$HULL_HOME/auth.json`, then from Docker's
//! `$DOCKER_CONFIG/config.json` (default `~/.docker/config.json`). Both use Docker's format:
//! `{"auths": {"HOST[:PORT]": {"auth": base64("user:password")}}}` (or `"username"` and
//! `"password"` fields). Credential helpers (`credsStore`) are not run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <hidden>)", self.username)
    }
}

impl Credentials {
    /// The `Authorization: Basic ...` value.
    pub fn basic_header(&self) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", self.username, self.password))
        )
    }
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// The credential files consulted, in order.
pub fn credential_files(hull_home: &Path) -> Vec<PathBuf> {
    let mut v = vec![hull_home.join("auth.json")];
    if let Some(d) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        v.push(PathBuf::from(d).join("config.json"));
    } else if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        v.push(PathBuf::from(h).join(".docker/config.json"));
    }
    v
}

/// Credentials for `registry` (`host[:port]`), from the first file that has them. A file that
/// exists but cannot be parsed is an error naming it, not silently skipped.
pub fn lookup(files: &[PathBuf], registry: &str) -> Result<Option<Credentials>, String> {
    for f in files {
        let Ok(bytes) = std::fs::read(f) else {
            continue;
        };
        let cfg: ConfigFile = serde_json::from_slice(&bytes)
            .map_err(|e| format!("credentials file {}: {e}", f.display()))?;
        if let Some(c) =
            find(&cfg, registry).map_err(|e| format!("credentials file {}: {e}", f.display()))?
        {
            return Ok(Some(c));
        }
    }
    Ok(None)
}

fn find(cfg: &ConfigFile, registry: &str) -> Result<Option<Credentials>, String> {
    let hub = registry == "docker.io"
        || registry == "index.docker.io"
        || registry == "registry-1.docker.io";
    let entry = cfg.auths.iter().find(|(k, _)| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let k = k.split('/').next().unwrap_or(k);
        k.eq_ignore_ascii_case(registry)
            || hub && (k == "index.docker.io" || k == "docker.io" || k == "registry-1.docker.io")
    });
    let Some((key, e)) = entry else {
        return Ok(None);
    };
    if let (Some(u), Some(p)) = (&e.username, &e.password) {
        return Ok(Some(Credentials {
            username: u.clone(),
            password: p.clone(),
        }));
    }
    let Some(a) = &e.auth else { return Ok(None) };
    let raw = base64::engine::general_purpose::STANDARD
        .decode(a.trim())
        .map_err(|err| format!("`auths.{key}.auth` is not base64: {err}"))?;
    let text =
        String::from_utf8(raw).map_err(|err| format!("`auths.{key}.auth` is not UTF-8: {err}"))?;
    let (u, p) = text
        .split_once(':')
        .ok_or_else(|| format!("`auths.{key}.auth` must encode `user:password`"))?;
    Ok(Some(Credentials {
        username: u.into(),
        password: p.into(),
    }))
}

/// One parsed `WWW-Authenticate` challenge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// `bearer` or `basic` (lowercase).
    pub scheme: String,
    pub params: BTreeMap<String, String>,
}

/// Parses `Bearer realm="https://x/token",service="reg",scope="repository:a:pull"`.
/// Quoted values may contain commas; unknown parameters are kept.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header
        .split_once(char::is_whitespace)
        .unwrap_or((header, ""));
    if scheme.is_empty() {
        return None;
    }
    let mut params = BTreeMap::new();
    let mut s = rest.trim_start();
    while !s.is_empty() {
        let eq = s.find('=')?;
        let key = s[..eq]
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        s = &s[eq + 1..];
        let value;
        if let Some(q) = s.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = q.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            out.push(n);
                        }
                    }
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => out.push(c),
                }
            }
            value = out;
            s = &q[end? + 1..];
        } else {
            let stop = s.find(',').unwrap_or(s.len());
            value = s[..stop].trim().to_string();
            s = &s[stop..];
        }
        params.insert(key, value);
        s = s.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

/// The token endpoint's answer (Docker uses `token`, OAuth2 `access_token`).
#[derive(Deserialize)]
pub struct TokenAnswer {
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub access_token: Option<String>,
}

/// Says which tokens came, never what they are: a token is a credential.
impl std::fmt::Debug for TokenAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |t: &Option<String>| t.as_ref().map(|_| "<hidden>");
        f.debug_struct("TokenAnswer")
            .field("token", &hidden(&self.token))
            .field("access_token", &hidden(&self.access_token))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_tokens() {
        let answer = TokenAnswer {
            token: Some("tok-secret".into()),
            access_token: None,
        };
        let shown = format!("{answer:?}");
        assert!(!shown.contains("tok-secret"), "{shown}");
        assert!(shown.contains("token: Some(\"<hidden>\")"), "{shown}");
        assert!(shown.contains("access_token: None"), "{shown}");
    }

    #[test]
    fn challenges_parse() {
        let c = parse_challenge(r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#).unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://auth.example/token");
        assert_eq!(c.params["service"], "registry.example");
        assert_eq!(c.params["scope"], "repository:a/b:pull,push");
        let c = parse_challenge(r#"Basic realm="Registry Realm""#).unwrap();
        assert_eq!(
            (c.scheme.as_str(), c.params["realm"].as_str()),
            ("basic", "Registry Realm")
        );
        let c = parse_challenge("Bearer realm=http://127.0.0.1:1/t, service=x").unwrap();
        assert_eq!(
            (c.params["realm"].as_str(), c.params["service"].as_str()),
            ("http://127.0.0.1:1/t", "x")
        );
        assert!(parse_challenge(r#"Bearer realm="unterminated"#).is_none());
    }

    #[test]
    fn credentials_from_docker_format() {
        let dir = std::env::temp_dir().join(format!("hull-auth-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("auth.json");
        let enc = base64::engine::general_purpose::STANDARD.encode("alice:s3:cret");
        std::fs::write(&f, format!(r#"{{"auths": {{"127.0.0.1:5000": {{"auth": "{enc}"}}, "https://index.docker.io/v1/": {{"username": "bob", "password": "pw"}}}}}}"#)).unwrap();
        let files = vec![dir.join("missing.json"), f.clone()];
        assert_eq!(
            lookup(&files, "127.0.0.1:5000").unwrap(),
            Some(Credentials {
                username: "alice".into(),
                password: "s3:cret".into()
            })
        );
        assert_eq!(
            lookup(&files, "docker.io").unwrap().unwrap().username,
            "bob"
        );
        assert_eq!(lookup(&files, "127.0.0.1:5001").unwrap(), None);
        std::fs::write(&f, r#"{"auths": {"h": {"auth": "!!"}}}"#).unwrap();
        assert!(lookup(&files, "h").unwrap_err().contains("not base64"));
        std::fs::write(&f, "not json").unwrap();
        assert!(lookup(&files, "h").unwrap_err().contains("auth.json"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
