//! Request transformations in the AI SDK's shape: a match (hosts, path exact/prefix/regex,
//! method, query parameters, header values) and header values to set (replacing what the box
//! sent) or add, each a literal or a reference to a brokered secret. JSON:
//! `{"match": {"hosts": ["api.example.com"], "path": {"prefix": "/v1/"}, "method": "POST"},
//!   "action": "set", "headers": {"x-api-key": {"secret": "openai"}}}`.

use std::collections::BTreeMap;

use http::{HeaderName, HeaderValue, Method};
use regex::Regex;
use serde::Deserialize;

use crate::name::{HostPattern, Name, NameError};

/// The longest regex source, and the compiled size cap, for a path match.
const REGEX_SIZE: usize = 1 << 16;

/// A path match.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum PathSpec {
    Exact(String),
    Prefix(String),
    Regex(String),
}

/// What a request must be for the rule to apply (every given part must hold).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    pub hosts: Vec<String>,
    #[serde(default)]
    pub path: Option<PathSpec>,
    #[serde(default)]
    pub method: Option<String>,
    /// Query parameters that must be present with these values.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Request headers that must be present with these values.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// A header value to put in: a literal, or a secret's real value (after an optional prefix,
/// as in `{"secret": "openai", "prefix": "Bearer "}`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ValueSpec {
    Literal(String),
    Secret {
        secret: String,
        #[serde(default)]
        prefix: String,
    },
}

/// `set` replaces every value the box sent for the header; `add` appends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    #[default]
    Set,
    Add,
}

/// A transformation as the caller gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformSpec {
    #[serde(rename = "match")]
    pub matches: MatchSpec,
    #[serde(default)]
    pub action: Action,
    pub headers: BTreeMap<String, ValueSpec>,
}

/// Why a transformation was refused.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("transformation {index}: host `{host}`")]
    BadHost {
        index: usize,
        host: String,
        #[source]
        source: NameError,
    },
    #[error("transformation {index} is for no host")]
    NoHosts { index: usize },
    #[error("transformation {index}: path regex")]
    BadRegex {
        index: usize,
        #[source]
        source: regex::Error,
    },
    #[error("transformation {index}: `{what}` is not a valid {kind}")]
    Bad {
        index: usize,
        what: String,
        kind: &'static str,
    },
    /// A literal header value that is not one (not quoted: it can be a credential).
    #[error("transformation {index}: the value for header `{header}` is not a valid header value (not shown: it can be a credential)")]
    BadValue { index: usize, header: String },
    #[error("transformation {index} refers to secret `{secret}`, which is not given")]
    UnknownSecret { index: usize, secret: String },
}

#[derive(Debug, Clone)]
enum PathMatch {
    Exact(String),
    Prefix(String),
    Regex(Regex),
}

/// A header value a rule puts in.
#[derive(Debug, Clone)]
pub enum Value {
    Literal(HeaderValue),
    /// The index of the secret in the broker's list, and the prefix.
    Secret(usize, String),
}

/// A checked transformation.
#[derive(Debug, Clone)]
pub struct Transform {
    hosts: Vec<HostPattern>,
    path: Option<PathMatch>,
    method: Option<Method>,
    query: Vec<(String, String)>,
    headers: Vec<(HeaderName, String)>,
    pub action: Action,
    pub set: Vec<(HeaderName, Value)>,
}

impl Transform {
    /// Checks spec number `index`; `secret_index` finds a referenced secret by name.
    pub fn new(
        index: usize,
        spec: TransformSpec,
        secret_index: impl Fn(&str) -> Option<usize>,
    ) -> Result<Transform, RuleError> {
        let m = spec.matches;
        if m.hosts.is_empty() {
            return Err(RuleError::NoHosts { index });
        }
        let hosts = m
            .hosts
            .iter()
            .map(|h| {
                HostPattern::parse(h).map_err(|source| RuleError::BadHost {
                    index,
                    host: h.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let path = match m.path {
            None => None,
            Some(PathSpec::Exact(p)) => Some(PathMatch::Exact(p)),
            Some(PathSpec::Prefix(p)) => Some(PathMatch::Prefix(p)),
            Some(PathSpec::Regex(r)) => Some(PathMatch::Regex(
                regex::RegexBuilder::new(&r)
                    .size_limit(REGEX_SIZE)
                    .build()
                    .map_err(|source| RuleError::BadRegex { index, source })?,
            )),
        };
        let bad = |what: &str, kind| RuleError::Bad {
            index,
            what: what.to_string(),
            kind,
        };
        let method = m
            .method
            .map(|s| {
                Method::from_bytes(s.to_ascii_uppercase().as_bytes()).map_err(|_| bad(&s, "method"))
            })
            .transpose()?;
        let header_name =
            |h: &str| HeaderName::from_bytes(h.as_bytes()).map_err(|_| bad(h, "header name"));
        let headers = m
            .headers
            .iter()
            .map(|(k, v)| Ok((header_name(k)?, v.clone())))
            .collect::<Result<Vec<_>, RuleError>>()?;
        let set = spec
            .headers
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    ValueSpec::Literal(s) => {
                        Value::Literal(HeaderValue::from_str(s).map_err(|_| {
                            RuleError::BadValue {
                                index,
                                header: k.clone(),
                            }
                        })?)
                    }
                    ValueSpec::Secret { secret, prefix } => {
                        HeaderValue::from_str(prefix).map_err(|_| bad(prefix, "header value"))?;
                        let i = secret_index(secret).ok_or_else(|| RuleError::UnknownSecret {
                            index,
                            secret: secret.clone(),
                        })?;
                        Value::Secret(i, prefix.clone())
                    }
                };
                Ok((header_name(k)?, value))
            })
            .collect::<Result<Vec<_>, RuleError>>()?;
        Ok(Transform {
            hosts,
            path,
            method,
            query: m.query.into_iter().collect(),
            headers,
            action: spec.action,
            set,
        })
    }

    /// Whether the rule may apply to some request to `host`.
    pub fn is_for(&self, host: &Name) -> bool {
        self.hosts.iter().any(|p| p.matches(host))
    }

    /// Whether the rule applies to this request (to `host`).
    pub fn applies(&self, host: &Name, parts: &http::request::Parts) -> bool {
        if !self.is_for(host) {
            return false;
        }
        if self.method.as_ref().is_some_and(|m| *m != parts.method) {
            return false;
        }
        let path = parts.uri.path();
        let path_ok = match &self.path {
            None => true,
            Some(PathMatch::Exact(p)) => path == p,
            Some(PathMatch::Prefix(p)) => path.starts_with(p.as_str()),
            Some(PathMatch::Regex(r)) => r.is_match(path),
        };
        if !path_ok {
            return false;
        }
        let query = parts.uri.query().unwrap_or("");
        let pairs: Vec<(&str, &str)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        if !self
            .query
            .iter()
            .all(|(k, v)| pairs.iter().any(|(pk, pv)| pk == k && pv == v))
        {
            return false;
        }
        self.headers.iter().all(|(k, v)| {
            parts
                .headers
                .get_all(k)
                .iter()
                .any(|have| have.as_bytes() == v.as_bytes())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> Transform {
        let spec: TransformSpec = serde_json::from_str(json).unwrap();
        Transform::new(0, spec, |s| (s == "openai").then_some(0)).unwrap()
    }

    fn req(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn every_given_part_of_a_match_must_hold() {
        let r = rule(
            r#"{"match":{"hosts":["*.example.test"],"path":{"prefix":"/v1/"},"method":"post",
                "query":{"beta":"1"},"headers":{"x-team":"a"}},
               "headers":{"x-api-key":{"secret":"openai"},"x-org":"org-1"}}"#,
        );
        let host = Name::parse("api.example.test").unwrap();
        let ok = req("POST", "/v1/chat?x=2&beta=1", &[("x-team", "a")]);
        assert!(r.applies(&host, &ok));
        assert!(
            !r.applies(&Name::parse("example.test").unwrap(), &ok),
            "apex"
        );
        assert!(!r.applies(&host, &req("GET", "/v1/chat?beta=1", &[("x-team", "a")])));
        assert!(!r.applies(&host, &req("POST", "/v2/chat?beta=1", &[("x-team", "a")])));
        assert!(!r.applies(&host, &req("POST", "/v1/chat?beta=2", &[("x-team", "a")])));
        assert!(!r.applies(&host, &req("POST", "/v1/chat?beta=1", &[("x-team", "b")])));
        assert_eq!(r.action, Action::Set);
        assert!(matches!(r.set[0], (_, Value::Secret(0, _))));

        let re = rule(
            r#"{"match":{"hosts":["h.test"],"path":{"regex":"^/models/[a-z]+$"}},"action":"add","headers":{"x":"y"}}"#,
        );
        let h = Name::parse("h.test").unwrap();
        assert!(re.applies(&h, &req("GET", "/models/abc", &[])));
        assert!(!re.applies(&h, &req("GET", "/models/abc/x", &[])));
        let ex =
            rule(r#"{"match":{"hosts":["h.test"],"path":{"exact":"/a"}},"headers":{"x":"y"}}"#);
        assert!(ex.applies(&h, &req("GET", "/a?q", &[])));
        assert!(!ex.applies(&h, &req("GET", "/a/", &[])));
    }

    #[test]
    fn a_reference_to_an_unknown_secret_is_refused() {
        let spec: TransformSpec = serde_json::from_str(
            r#"{"match":{"hosts":["h.test"]},"headers":{"authorization":{"secret":"nope"}}}"#,
        )
        .unwrap();
        assert!(matches!(
            Transform::new(3, spec, |_| None),
            Err(RuleError::UnknownSecret { index: 3, .. })
        ));
    }
}
