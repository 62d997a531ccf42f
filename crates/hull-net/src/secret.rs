//! Brokered secrets: the real value the gateway holds (in memory only, zeroized when dropped,
//! never printed or serialized) and the placeholder a box sees instead, with the hosts and
//! header names where the gateway swaps one for the other.

use std::fmt;

use base64::Engine;
use http::HeaderName;
use serde::Deserialize;
use zeroize::Zeroizing;

use crate::name::{HostPattern, Name, NameError};

/// The longest value the broker accepts: the response scrubber holds back one byte less than
/// the longest form of a value across chunks, so this bounds its buffering.
pub const MAX_VALUE_LEN: usize = 4096;

/// A secret's value: readable by the broker, never by `Debug`, never serialized.
#[derive(Clone)]
pub struct SecretValue(Zeroizing<String>);

impl<'de> Deserialize<'de> for SecretValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SecretValue, D::Error> {
        String::deserialize(d).map(SecretValue::new)
    }
}

impl SecretValue {
    pub fn new(value: impl Into<String>) -> SecretValue {
        SecretValue(Zeroizing::new(value.into()))
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret>")
    }
}

/// A secret as a caller (the CLI, an SDK's JSON) gives it:
/// `{"name": "openai", "value": "sk-...", "hosts": ["api.openai.com"], "headers": ["authorization"]}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    /// Letters, digits, `_` and `-`: it is part of the placeholder and of log lines.
    pub name: String,
    pub value: SecretValue,
    /// Where the real value may go (`api.example.com`, `*.example.com`).
    pub hosts: Vec<String>,
    /// The request headers the placeholder is replaced in; `authorization` when not given.
    #[serde(default = "default_headers")]
    pub headers: Vec<String>,
    /// The host may echo the secret in a way the scrubber cannot see (a compressed
    /// response): pass such responses instead of closing the connection.
    #[serde(default)]
    pub reflect_ok: bool,
    /// Only requests whose path starts with this get the value (`/v1/`).
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// Only requests with one of these methods get the value (any when empty).
    #[serde(default)]
    pub methods: Vec<String>,
    /// The placeholder, when the caller made it (it put it in the box's environment before
    /// the gateway started): `hull-secret-<name>-<32 hex>`. Made here when not given.
    #[serde(default)]
    pub placeholder: Option<String>,
}

fn default_headers() -> Vec<String> {
    vec!["authorization".into()]
}

/// Why a secret spec was refused (never quoting its value).
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret name `{0}`: letters, digits, `_` and `-` only, 1 to 64 of them")]
    BadName(String),
    #[error("secret `{name}`: host `{host}`")]
    BadHost {
        name: String,
        host: String,
        #[source]
        source: NameError,
    },
    #[error("secret `{0}` is for no host")]
    NoHosts(String),
    #[error("secret `{name}`: `{header}` is not a header name")]
    BadHeader { name: String, header: String },
    #[error("secret `{name}`: `{method}` is not a method")]
    BadMethod { name: String, method: String },
    #[error("secret `{0}`: the value is empty, longer than {MAX_VALUE_LEN} bytes, or not valid in a header")]
    BadValue(String),
    #[error("no randomness from the kernel")]
    Random(#[source] getrandom::Error),
    #[error("secret `{0}`: a given placeholder must be hull-secret-<name>-<32 hex digits>")]
    BadPlaceholder(String),
}

/// A fresh placeholder for the secret `name`: `hull-secret-<name>-<32 hex>` (128 random bits).
pub fn placeholder(name: &str) -> Result<String, SecretError> {
    let mut rand = [0u8; 16];
    getrandom::fill(&mut rand).map_err(SecretError::Random)?;
    Ok(format!("hull-secret-{name}-{}", crate::ca::hex(&rand)))
}

/// Whether `p` is a placeholder of the shape [`placeholder`] makes, for `name`.
fn is_placeholder(name: &str, p: &str) -> bool {
    p.strip_prefix("hull-secret-")
        .and_then(|r| r.strip_prefix(name))
        .and_then(|r| r.strip_prefix('-'))
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A secret ready for the broker (see the module comment).
#[derive(Clone)]
pub struct Secret {
    name: String,
    value: SecretValue,
    placeholder: String,
    hosts: Vec<HostPattern>,
    headers: Vec<HeaderName>,
    reflect_ok: bool,
    path_prefix: Option<String>,
    methods: Vec<http::Method>,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("placeholder", &self.placeholder)
            .field("hosts", &self.hosts)
            .field("headers", &self.headers)
            .field("reflect_ok", &self.reflect_ok)
            .field("path_prefix", &self.path_prefix)
            .field("methods", &self.methods)
            .finish_non_exhaustive()
    }
}

impl Secret {
    /// Checks `spec` and gives it a fresh placeholder, `hull-secret-<name>-<32 hex>`.
    pub fn new(spec: SecretSpec) -> Result<Secret, SecretError> {
        let name = spec.name;
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(SecretError::BadName(name));
        }
        if spec.hosts.is_empty() {
            return Err(SecretError::NoHosts(name));
        }
        let hosts = spec
            .hosts
            .iter()
            .map(|h| {
                HostPattern::parse(h).map_err(|source| SecretError::BadHost {
                    name: name.clone(),
                    host: h.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let headers = spec
            .headers
            .iter()
            .map(|h| {
                HeaderName::from_bytes(h.as_bytes()).map_err(|_| SecretError::BadHeader {
                    name: name.clone(),
                    header: h.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let v = spec.value.expose();
        if v.is_empty() || v.len() > MAX_VALUE_LEN || http::HeaderValue::from_str(v).is_err() {
            return Err(SecretError::BadValue(name));
        }
        let methods = spec
            .methods
            .iter()
            .map(|m| {
                http::Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| {
                    SecretError::BadMethod {
                        name: name.clone(),
                        method: m.clone(),
                    }
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let placeholder = match spec.placeholder {
            Some(p) if is_placeholder(&name, &p) => p,
            Some(_) => return Err(SecretError::BadPlaceholder(name)),
            None => placeholder(&name)?,
        };
        Ok(Secret {
            placeholder,
            name,
            value: spec.value,
            hosts,
            headers,
            reflect_ok: spec.reflect_ok,
            path_prefix: spec.path_prefix,
            methods,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the box is given in place of the value (its environment carries this).
    pub fn placeholder(&self) -> &str {
        &self.placeholder
    }

    pub fn reflect_ok(&self) -> bool {
        self.reflect_ok
    }

    /// Whether the real value may go to `host`.
    pub fn is_for(&self, host: &Name) -> bool {
        self.hosts.iter().any(|p| p.matches(host))
    }

    /// Whether the value may go with this request (its path prefix and methods, if given).
    pub fn allows(&self, method: &http::Method, path: &str) -> bool {
        self.path_prefix
            .as_deref()
            .is_none_or(|p| path.starts_with(p))
            && (self.methods.is_empty() || self.methods.contains(method))
    }

    /// Whether the placeholder is replaced in request header `h`.
    pub fn in_header(&self, h: &HeaderName) -> bool {
        self.headers.contains(h)
    }

    pub(crate) fn value(&self) -> &str {
        self.value.expose()
    }

    /// The forms in which a response could carry the value back: raw, base64 (standard and
    /// URL alphabets, unpadded so a padded copy matches too) and percent-encoded (both hex
    /// cases, and `+` for spaces as forms encode them). Duplicates dropped.
    pub(crate) fn reflections(&self) -> Vec<Zeroizing<Vec<u8>>> {
        let v = self.value().as_bytes();
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD;
        let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut forms: Vec<Zeroizing<Vec<u8>>> = vec![
            Zeroizing::new(v.to_vec()),
            Zeroizing::new(b64.encode(v).into_bytes()),
            Zeroizing::new(b64url.encode(v).into_bytes()),
            Zeroizing::new(percent(v, b"0123456789ABCDEF", false)),
            Zeroizing::new(percent(v, b"0123456789abcdef", false)),
            Zeroizing::new(percent(v, b"0123456789ABCDEF", true)),
        ];
        // Inside a longer base64 text (`Basic` credentials, an echo of `Bearer <value>`) the
        // value starts at any of three alignments; the characters that depend on the value
        // alone are a fixed run for each.
        for engine in [&b64, &b64url] {
            for lead in 0..3 {
                if let Some(run) = aligned_run(engine, v, lead) {
                    forms.push(run);
                }
            }
        }
        let mut seen: Vec<Zeroizing<Vec<u8>>> = Vec::new();
        for f in forms.drain(..) {
            if !seen.iter().any(|s| **s == *f) {
                seen.push(f);
            }
        }
        seen
    }
}

/// The base64 characters that encode `v` alone when `lead` bytes (0 to 2) of something else
/// come before it: character `j` covers bits `6j..6j+6` of the stream, and the value holds
/// bits `8*lead..8*(lead+len)`. `None` when the run is too short to be told from chance.
fn aligned_run(
    engine: &base64::engine::GeneralPurpose,
    v: &[u8],
    lead: usize,
) -> Option<Zeroizing<Vec<u8>>> {
    let mut stream = Zeroizing::new(vec![0u8; lead]);
    stream.extend_from_slice(v);
    let text = Zeroizing::new(engine.encode(&*stream).into_bytes());
    let first = (8 * lead).div_ceil(6);
    let end = (8 * (lead + v.len())) / 6;
    (end >= first + 8).then(|| Zeroizing::new(text[first..end].to_vec()))
}

/// Percent-encodes every byte outside RFC 3986's unreserved set (`plus` writes spaces as `+`).
fn percent(v: &[u8], digits: &[u8; 16], plus: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 3);
    for &b in v {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else if plus && b == b' ' {
            out.push(b'+');
        } else {
            out.extend_from_slice(&[
                b'%',
                digits[usize::from(b >> 4)],
                digits[usize::from(b & 15)],
            ]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> SecretSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_secret_gets_a_fresh_placeholder_and_never_shows_its_value() {
        let s = Secret::new(spec(
            r#"{"name":"openai","value":"sk-REAL/value+1","hosts":["api.example.test"]}"#,
        ))
        .unwrap();
        let p = s.placeholder();
        assert!(p.starts_with("hull-secret-openai-"), "{p}");
        assert_eq!(p.len(), "hull-secret-openai-".len() + 32);
        let again = Secret::new(spec(
            r#"{"name":"openai","value":"sk-REAL/value+1","hosts":["api.example.test"]}"#,
        ))
        .unwrap();
        assert_ne!(again.placeholder(), p, "random per secret");
        assert!(s.in_header(&HeaderName::from_static("authorization")));
        assert!(!s.in_header(&HeaderName::from_static("x-api-key")));
        let shown = format!(
            "{s:?} {:?}",
            spec(r#"{"name":"a","value":"sk-REAL/value+1","hosts":["x.test"]}"#)
        );
        assert!(!shown.contains("sk-REAL"), "{shown}");
        let forms: Vec<String> = s
            .reflections()
            .iter()
            .map(|f| String::from_utf8(f.to_vec()).unwrap())
            .collect();
        assert!(forms.contains(&"sk-REAL/value+1".to_string()));
        assert!(
            forms.contains(&"c2stUkVBTC92YWx1ZSsx".to_string()),
            "{forms:?}"
        );
        assert!(
            forms.contains(&"sk-REAL%2Fvalue%2B1".to_string()),
            "{forms:?}"
        );
        assert!(
            forms.contains(&"sk-REAL%2fvalue%2b1".to_string()),
            "{forms:?}"
        );
    }

    #[test]
    fn bad_specs_are_refused_without_quoting_the_value() {
        let bad = |json: &str| Secret::new(spec(json)).unwrap_err().to_string();
        assert!(bad(r#"{"name":"a b","value":"v","hosts":["x.test"]}"#).contains("`a b`"));
        assert!(bad(r#"{"name":"a","value":"v","hosts":[]}"#).contains("no host"));
        assert!(bad(r#"{"name":"a","value":"v","hosts":["*"]}"#).contains("host `*`"));
        let e = bad(r#"{"name":"a","value":"line\r\nx-evil: 1","hosts":["x.test"]}"#);
        assert!(!e.contains("evil"), "{e}");
        assert!(
            serde_json::from_str::<SecretSpec>(r#"{"name":"a","value":"v","hosts":[],"x":1}"#)
                .is_err()
        );
    }
}
