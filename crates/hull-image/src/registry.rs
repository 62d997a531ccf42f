//! A client for one repository of a distribution-v2 registry: manifests and blobs over
//! http(s), with anonymous, bearer-token (the `WWW-Authenticate: Bearer realm=...` flow) and
//! basic authentication, connect and read timeouts, and size limits on documents.
//!
//! Transport policy (see `reference::Scheme`): https with verified certificates (rustls and the
//! webpki roots), plain http only for loopback registries and hosts named with
//! `--insecure-registry`. A token realm gets the same policy, so credentials never travel in
//! clear text to a host nobody named.

use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;

use crate::auth::{self, Challenge, Credentials, TokenAnswer};
use crate::oci::Digest;
use crate::reference::{self, Reference, Scheme};

pub use crate::oci::DOCUMENT_LIMIT;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot reach registry {registry} ({url}); check the address and that the registry is running (connect timeout {connect_s}s, read timeout {read_s}s, `hull pull --timeout`)")]
    Unreachable {
        registry: String,
        url: String,
        connect_s: u64,
        read_s: u64,
        source: Box<ureq::Transport>,
    },
    #[error("registry {registry} answered HTTP {status} for {what}{detail}")]
    Status {
        registry: String,
        status: u16,
        what: String,
        detail: String,
    },
    #[error("registry {registry} refused access to {repository} ({why}); put credentials for `{registry}` in {files} (Docker's config.json format)")]
    Unauthorized {
        registry: String,
        repository: String,
        why: String,
        files: String,
    },
    #[error("registry {registry} sent an unusable authentication challenge `{challenge}`: {why}")]
    Challenge {
        registry: String,
        challenge: String,
        why: String,
    },
    #[error("{0}")]
    Credentials(String),
    #[error("reading {what} from {registry}")]
    Read {
        registry: String,
        what: String,
        source: std::io::Error,
    },
    #[error("{what} from {registry} is larger than {limit} bytes; refused")]
    TooLarge {
        registry: String,
        what: String,
        limit: u64,
    },
}

/// Connection settings for a pull.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Hosts (`host` or `host:port`) that may be spoken to over plain http.
    pub insecure: Vec<String>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            insecure: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
        }
    }
}

pub struct Client {
    agent: ureq::Agent,
    opts: ClientOptions,
    registry: String,
    repository: String,
    base: String,
    credentials: Option<Credentials>,
    credential_files: String,
    /// The `Authorization` value that worked last (a bearer token or basic credentials).
    authorization: Mutex<Option<String>>,
}

/// Shows where the client pulls from and as whom, never a secret: the credentials print
/// their user name only, and of the `Authorization` value that worked only whether there is one.
impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let authorized = self.authorization.lock().is_ok_and(|a| a.is_some());
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("opts", &self.opts)
            .field("credentials", &self.credentials)
            .field("credential_files", &self.credential_files)
            .field("authorized", &authorized)
            .finish_non_exhaustive()
    }
}

/// The manifest accept list: OCI and Docker v2, single and multi-platform.
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

impl Client {
    /// A client for `reference`'s repository. `credentials` come from `auth::lookup`;
    /// `credential_files` is only used in messages.
    pub fn new(
        reference: &Reference,
        opts: ClientOptions,
        credentials: Option<Credentials>,
        credential_files: String,
    ) -> Client {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(opts.connect_timeout)
            .timeout_read(opts.read_timeout)
            .timeout_write(opts.read_timeout)
            .user_agent(concat!("hull/", env!("CARGO_PKG_VERSION")))
            .redirects(5)
            // Blob downloads may be redirected to storage elsewhere: never carry our
            // Authorization header there.
            .redirect_auth_headers(ureq::RedirectAuthHeaders::Never)
            .build();
        let scheme = Scheme::for_registry(&reference.registry, &opts.insecure);
        let base = format!(
            "{}://{}/v2/{}",
            scheme.as_str(),
            reference.api_host(),
            reference.repository
        );
        Client {
            agent,
            opts,
            registry: reference.registry.clone(),
            repository: reference.repository.clone(),
            base,
            credentials,
            credential_files,
            authorization: Mutex::new(None),
        }
    }

    pub fn registry(&self) -> &str {
        &self.registry
    }

    fn unreachable(&self, url: &str, t: ureq::Transport) -> RegistryError {
        RegistryError::Unreachable {
            registry: self.registry.clone(),
            url: url.into(),
            connect_s: self.opts.connect_timeout.as_secs(),
            read_s: self.opts.read_timeout.as_secs(),
            source: Box::new(t),
        }
    }

    /// GET `url`, answering one authentication challenge if the registry sends one.
    fn get(
        &self,
        url: &str,
        accept: Option<&str>,
        range_from: u64,
        what: &str,
    ) -> Result<ureq::Response, RegistryError> {
        for attempt in 0..2 {
            let mut req = self.agent.get(url);
            if let Some(a) = accept {
                req = req.set("Accept", a);
            }
            if range_from > 0 {
                req = req.set("Range", &format!("bytes={range_from}-"));
            }
            let authz = self
                .authorization
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if let Some(a) = &authz {
                req = req.set("Authorization", a);
            }
            match req.call() {
                Ok(r) => return Ok(r),
                Err(ureq::Error::Status(401, resp)) if attempt == 0 => self.authenticate(&resp)?,
                Err(ureq::Error::Status(401 | 403, resp)) => {
                    let mut why = resp.header("WWW-Authenticate").map_or_else(
                        || format!("HTTP {}", resp.status()),
                        |c| format!("HTTP {} with {c}", resp.status()),
                    );
                    if authz.as_deref().is_some_and(|a| a.starts_with("Basic ")) {
                        why = format!("the credentials for it were refused: {why}");
                    }
                    return Err(self.unauthorized(why));
                }
                Err(ureq::Error::Status(status, resp)) => {
                    return Err(RegistryError::Status {
                        registry: self.registry.clone(),
                        status,
                        what: what.into(),
                        detail: body_excerpt(resp),
                    })
                }
                Err(ureq::Error::Transport(t)) => return Err(self.unreachable(url, t)),
            }
        }
        Err(self.unauthorized("the credentials or token were refused".into()))
    }

    fn unauthorized(&self, why: String) -> RegistryError {
        RegistryError::Unauthorized {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            why,
            files: self.credential_files.clone(),
        }
    }

    /// Answers a 401: a bearer challenge fetches a token from the realm (with basic
    /// credentials if we have them); a basic challenge uses the credentials.
    fn authenticate(&self, resp: &ureq::Response) -> Result<(), RegistryError> {
        let challenges: Vec<Challenge> = resp
            .all("WWW-Authenticate")
            .into_iter()
            .filter_map(auth::parse_challenge)
            .collect();
        let header = if let Some(c) = challenges.iter().find(|c| c.scheme == "bearer") {
            format!("Bearer {}", self.fetch_token(c)?)
        } else if challenges.iter().any(|c| c.scheme == "basic") {
            match &self.credentials {
                Some(c) => c.basic_header(),
                None => {
                    return Err(self.unauthorized("it asks for a user name and password".into()))
                }
            }
        } else {
            return Err(self.unauthorized(format!(
                "HTTP 401 without a Bearer or Basic challenge ({:?})",
                resp.all("WWW-Authenticate")
            )));
        };
        *self
            .authorization
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(header);
        Ok(())
    }

    fn fetch_token(&self, c: &Challenge) -> Result<String, RegistryError> {
        let bad = |why: String| RegistryError::Challenge {
            registry: self.registry.clone(),
            challenge: format!("{c:?}"),
            why,
        };
        let realm = c
            .params
            .get("realm")
            .ok_or_else(|| bad("it has no realm".into()))?;
        let host = check_realm(realm, &self.opts.insecure).map_err(bad)?;
        let scope = c
            .params
            .get("scope")
            .cloned()
            .unwrap_or_else(|| format!("repository:{}:pull", self.repository));
        let mut url = realm.clone();
        let mut sep = if url.contains('?') { '&' } else { '?' };
        if let Some(s) = c.params.get("service") {
            url.push_str(&format!("{sep}service={}", url_encode(s)));
            sep = '&';
        }
        url.push_str(&format!("{sep}scope={}", url_encode(&scope)));
        let mut req = self.agent.get(&url);
        if let Some(cr) = &self.credentials {
            req = req.set("Authorization", &cr.basic_header());
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(status, resp)) if status == 401 || status == 403 => {
                return Err(self.unauthorized(format!(
                    "the token service {host} answered HTTP {status}{}",
                    body_excerpt(resp)
                )));
            }
            Err(ureq::Error::Status(status, resp)) => {
                return Err(RegistryError::Status {
                    registry: self.registry.clone(),
                    status,
                    what: format!("a token from {host}"),
                    detail: body_excerpt(resp),
                })
            }
            Err(ureq::Error::Transport(t)) => return Err(self.unreachable(&url, t)),
        };
        let bytes = read_limited(resp, DOCUMENT_LIMIT)
            .map_err(|e| self.read_error("a token", e))?
            .ok_or_else(|| self.too_large("a token"))?;
        let answer: TokenAnswer = serde_json::from_slice(&bytes)
            .map_err(|e| bad(format!("the token answer is not JSON: {e}")))?;
        answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad("the token answer has no token".into()))
    }

    fn read_error(&self, what: &str, source: std::io::Error) -> RegistryError {
        RegistryError::Read {
            registry: self.registry.clone(),
            what: what.into(),
            source,
        }
    }

    fn too_large(&self, what: &str) -> RegistryError {
        RegistryError::TooLarge {
            registry: self.registry.clone(),
            what: what.into(),
            limit: DOCUMENT_LIMIT,
        }
    }

    /// A manifest or index by tag or digest: its bytes and media type (from the document, else
    /// the Content-Type header).
    pub fn manifest(&self, reference: &str) -> Result<(Vec<u8>, String), RegistryError> {
        let url = format!("{}/manifests/{reference}", self.base);
        let what = format!("manifest {}:{reference}", self.repository);
        let resp = self.get(&url, Some(ACCEPT), 0, &what)?;
        let ctype = resp
            .header("Content-Type")
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let bytes = read_limited(resp, DOCUMENT_LIMIT)
            .map_err(|e| self.read_error(&what, e))?
            .ok_or_else(|| self.too_large(&what))?;
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Peek {
            #[serde(default)]
            media_type: String,
            #[serde(default)]
            schema_version: u32,
        }
        let peek: Option<Peek> = serde_json::from_slice(&bytes).ok();
        let media_type = match peek {
            Some(p) if !p.media_type.is_empty() => p.media_type,
            Some(p) if p.schema_version == 1 => {
                "application/vnd.docker.distribution.manifest.v1+json".into()
            }
            _ => ctype,
        };
        Ok((bytes, media_type))
    }

    /// A small blob (an image config) in memory.
    pub fn small_blob(&self, d: &Digest, what: &str) -> Result<Vec<u8>, RegistryError> {
        let url = format!("{}/blobs/{d}", self.base);
        let resp = self.get(&url, None, 0, what)?;
        read_limited(resp, DOCUMENT_LIMIT)
            .map_err(|e| self.read_error(what, e))?
            .ok_or_else(|| self.too_large(what))
    }

    /// A blob as a stream, from byte `from` on (a Range request when `from > 0`). Returns the
    /// HTTP status (206 when the range was honoured) and the body.
    pub fn blob_stream(
        &self,
        d: &Digest,
        from: u64,
        what: &str,
    ) -> Result<(u16, Box<dyn Read + Send + Sync>), RegistryError> {
        let url = format!("{}/blobs/{d}", self.base);
        let resp = self.get(&url, None, from, what)?;
        Ok((resp.status(), resp.into_reader()))
    }

    /// Wraps a read failure of a blob body.
    pub fn body_error(&self, what: &str, source: std::io::Error) -> RegistryError {
        self.read_error(what, source)
    }
}

/// A token realm must be https, or plain http to a host that may be spoken to in clear
/// (loopback, or named with `--insecure-registry`): credentials go there. Returns its host.
pub fn check_realm<'a>(realm: &'a str, insecure: &[String]) -> Result<&'a str, String> {
    let (scheme, rest) = realm
        .split_once("://")
        .ok_or_else(|| format!("realm `{realm}` is not an http(s) URL"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.contains('@') {
        return Err(format!("realm `{realm}` has no usable host"));
    }
    match scheme {
        "https" => Ok(host),
        "http" if Scheme::for_registry(host, insecure) == Scheme::Http => Ok(host),
        "http" => Err(format!("realm `{realm}` is plain http to a host that is neither loopback nor named with --insecure-registry; refusing to send credentials or trust a token in clear text")),
        other => Err(format!("realm scheme `{other}` is not http(s)")),
    }
}

/// The body, or None when it is longer than `limit`.
fn read_limited(resp: ureq::Response, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut v = Vec::new();
    resp.into_reader().take(limit + 1).read_to_end(&mut v)?;
    Ok((v.len() as u64 <= limit).then_some(v))
}

/// `: <first 200 bytes of the body>` for error messages (registries explain errors in JSON).
fn body_excerpt(resp: ureq::Response) -> String {
    let mut v = Vec::new();
    let _ = resp.into_reader().take(200).read_to_end(&mut v);
    let s = String::from_utf8_lossy(&v)
        .trim()
        .replace(['\n', '\r'], " ");
    if s.is_empty() {
        String::new()
    } else {
        format!(": {s}")
    }
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Re-exported for callers that only need the policy check.
pub use reference::is_loopback;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_hides_credentials_and_tokens() {
        let reference = Reference::parse("registry.example/team/app:1").unwrap();
        let credentials = Credentials {
            username: "alice".into(),
            password: "pw-secret".into(),
        };
        let client = Client::new(
            &reference,
            ClientOptions::default(),
            Some(credentials),
            "auth.json".into(),
        );
        *client.authorization.lock().unwrap() = Some("Bearer tok-secret".into());
        let shown = format!("{client:?}");
        assert!(!shown.contains("pw-secret"), "{shown}");
        assert!(!shown.contains("tok-secret"), "{shown}");
        assert!(shown.contains("alice"), "{shown}");
        assert!(shown.contains("authorized: true"), "{shown}");
        assert!(shown.contains("registry.example"), "{shown}");
    }

    #[test]
    fn url_encoding_of_scopes() {
        assert_eq!(
            url_encode("repository:a/b:pull"),
            "repository%3Aa%2Fb%3Apull"
        );
    }

    #[test]
    fn token_realms_follow_the_transport_policy() {
        let none: Vec<String> = Vec::new();
        assert_eq!(
            check_realm("https://auth.example/token", &none),
            Ok("auth.example")
        );
        assert_eq!(
            check_realm("http://127.0.0.1:5001/token?x=1", &none),
            Ok("127.0.0.1:5001")
        );
        assert_eq!(
            check_realm("http://localhost/token", &none),
            Ok("localhost")
        );
        assert!(check_realm("http://auth.example/token", &none)
            .unwrap_err()
            .contains("--insecure-registry"));
        assert_eq!(
            check_realm("http://auth.lan/token", &["auth.lan".to_string()]),
            Ok("auth.lan")
        );
        assert!(check_realm("ftp://x/t", &none).is_err());
        assert!(check_realm("https://user@evil/t", &none).is_err());
        assert!(check_realm("token", &none).is_err());
    }
}
