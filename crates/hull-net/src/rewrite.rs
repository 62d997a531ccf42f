//! The request side of brokering: a request the box sent to an intercepted host, rewritten
//! before it goes upstream. Placeholders become real values only in the header names their
//! secret is for, only on its hosts; a placeholder anywhere else is left as is (it is
//! worthless) and reported as a violation. Transformations then set or add headers.

use http::request::Parts;
use http::{HeaderName, HeaderValue};
use zeroize::Zeroizing;

use crate::name::Name;
use crate::rules::{Action, Transform, Value};
use crate::secret::Secret;

/// What rewriting did, for the log and the response side.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// Indexes of the secrets whose real value went into the request.
    pub substituted: Vec<usize>,
    /// Indexes of the secrets whose reflections the response is scrubbed of (every secret
    /// for this host: one sent earlier may be echoed now).
    pub scrub: Vec<usize>,
    /// What the box did that brokering refused to honour (never quoting a value).
    pub violations: Vec<String>,
}

/// Rewrites `parts` of a request to `host` (see the module comment).
pub fn rewrite(parts: &mut Parts, host: &Name, secrets: &[Secret], rules: &[Transform]) -> Rewrite {
    let mut out = Rewrite::default();
    let uri = parts.uri.to_string();
    for s in secrets {
        if uri.contains(s.placeholder()) {
            out.violations.push(format!(
                "placeholder of secret {} in the URL (left as is)",
                s.name()
            ));
        }
    }
    let names: Vec<HeaderName> = parts.headers.keys().cloned().collect();
    for h in names {
        let values: Vec<HeaderValue> = parts.headers.get_all(&h).iter().cloned().collect();
        let mut changed = false;
        let mut new_values = Vec::with_capacity(values.len());
        for v in values {
            // Holds the real value once substituted: wiped when dropped.
            let mut bytes = Zeroizing::new(v.as_bytes().to_vec());
            for (i, s) in secrets.iter().enumerate() {
                if !contains(&bytes, s.placeholder().as_bytes()) {
                    continue;
                }
                if !s.is_for(host) {
                    out.violations.push(format!(
                        "placeholder of secret {} sent to {host}, not a host it is for (left as is)",
                        s.name()
                    ));
                } else if !s.allows(&parts.method, parts.uri.path()) {
                    out.violations.push(format!(
                        "placeholder of secret {} sent with {} {}, not a request it is for (left as is)",
                        s.name(),
                        parts.method,
                        parts.uri.path()
                    ));
                } else if !s.in_header(&h) {
                    out.violations.push(format!(
                        "placeholder of secret {} in header {h}, not a header it is for (left as is)",
                        s.name()
                    ));
                } else {
                    bytes = Zeroizing::new(replace(
                        &bytes,
                        s.placeholder().as_bytes(),
                        s.value().as_bytes(),
                    ));
                    push_once(&mut out.substituted, i);
                    changed = true;
                }
            }
            // The value was checked header-safe when the secret was made.
            new_values.push(HeaderValue::from_bytes(&bytes).unwrap_or(v));
        }
        if changed {
            parts.headers.remove(&h);
            for v in new_values {
                parts.headers.append(h.clone(), v);
            }
        }
    }
    for (n, rule) in rules.iter().enumerate() {
        if !rule.applies(host, parts) {
            continue;
        }
        for (h, value) in &rule.set {
            let v = match value {
                Value::Literal(v) => v.clone(),
                Value::Secret(i, prefix) => {
                    let Some(s) = secrets.get(*i) else { continue };
                    if !s.is_for(host) || !s.allows(&parts.method, parts.uri.path()) {
                        out.violations.push(format!(
                            "transformation {n} puts secret {} into a request to {host}, not a request it is for (skipped)",
                            s.name()
                        ));
                        continue;
                    }
                    let Ok(v) = HeaderValue::from_str(&format!("{prefix}{}", s.value())) else {
                        continue;
                    };
                    push_once(&mut out.substituted, *i);
                    v
                }
            };
            if rule.action == Action::Set {
                parts.headers.remove(h);
            }
            parts.headers.append(h.clone(), v);
        }
    }
    out.scrub = secrets
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_for(host))
        .map(|(i, _)| i)
        .collect();
    if !out.scrub.is_empty() {
        // So the response comes back in a form the scrubber can read.
        parts.headers.remove(http::header::ACCEPT_ENCODING);
    }
    out
}

fn push_once(v: &mut Vec<usize>, i: usize) {
    if !v.contains(&i) {
        v.push(i);
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn replace(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len() + to.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::TransformSpec;
    use crate::secret::SecretSpec;

    fn secret(json: serde_json::Value) -> Secret {
        Secret::new(serde_json::from_value::<SecretSpec>(json).unwrap()).unwrap()
    }

    #[test]
    fn placeholders_become_values_only_in_their_headers_on_their_hosts() {
        let s = secret(serde_json::json!({"name":"k","value":"REAL","hosts":["api.test"]}));
        let p = s.placeholder().to_string();
        let secrets = vec![s];
        let host = Name::parse("api.test").unwrap();
        let mut parts = http::Request::builder()
            .uri(format!("/x?key={p}"))
            .header("authorization", format!("Bearer {p}"))
            .header("x-note", p.as_str())
            .header("accept-encoding", "gzip")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let r = rewrite(&mut parts, &host, &secrets, &[]);
        assert_eq!(parts.headers["authorization"], "Bearer REAL");
        assert_eq!(parts.headers["x-note"], p.as_str());
        assert!(parts.headers.get("accept-encoding").is_none());
        assert_eq!(r.substituted, vec![0]);
        assert_eq!(r.violations.len(), 2, "{:?}", r.violations);
        assert!(r.violations.iter().all(|v| !v.contains("REAL")));

        let scoped = vec![secret(
            serde_json::json!({"name":"k","value":"REAL","hosts":["api.test"],
            "path_prefix":"/v1/","methods":["post"]}),
        )];
        let sp = scoped[0].placeholder().to_string();
        for (method, path, real) in [
            ("POST", "/v1/chat", true),
            ("GET", "/v1/chat", false),
            ("POST", "/v2/x", false),
        ] {
            let mut parts = http::Request::builder()
                .method(method)
                .uri(path)
                .header("authorization", sp.as_str())
                .body(())
                .unwrap()
                .into_parts()
                .0;
            let r = rewrite(&mut parts, &host, &scoped, &[]);
            assert_eq!(
                parts.headers["authorization"] == "REAL",
                real,
                "{method} {path}"
            );
            assert_eq!(r.violations.is_empty(), real, "{:?}", r.violations);
        }

        let other = Name::parse("evil.test").unwrap();
        let mut parts = http::Request::builder()
            .header("authorization", format!("Bearer {p}"))
            .header("accept-encoding", "gzip")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let r = rewrite(&mut parts, &other, &secrets, &[]);
        assert_eq!(
            parts.headers["authorization"],
            format!("Bearer {p}").as_str()
        );
        assert!(r.substituted.is_empty() && r.scrub.is_empty());
        assert!(r.violations[0].contains("not a host it is for"));
        assert_eq!(parts.headers["accept-encoding"], "gzip");
    }

    #[test]
    fn transformations_set_or_add_literals_and_secrets() {
        let secrets = vec![secret(
            serde_json::json!({"name":"k","value":"REAL","hosts":["api.test"]}),
        )];
        let rule = |j: serde_json::Value| {
            Transform::new(
                0,
                serde_json::from_value::<TransformSpec>(j).unwrap(),
                |n| (n == "k").then_some(0),
            )
            .unwrap()
        };
        let rules = vec![
            rule(
                serde_json::json!({"match":{"hosts":["api.test"]},"action":"set",
                "headers":{"x-api-key":{"secret":"k","prefix":"Key "}}}),
            ),
            rule(
                serde_json::json!({"match":{"hosts":["*.test"]},"action":"add",
                "headers":{"x-tag":"two"}}),
            ),
            rule(serde_json::json!({"match":{"hosts":["other.test"]},
                "headers":{"x-api-key":{"secret":"k"}}})),
        ];
        let host = Name::parse("api.test").unwrap();
        let mut parts = http::Request::builder()
            .header("x-api-key", "box-chosen")
            .header("x-tag", "one")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let r = rewrite(&mut parts, &host, &secrets, &rules);
        let keys: Vec<_> = parts.headers.get_all("x-api-key").iter().collect();
        assert_eq!(keys, vec!["Key REAL"]);
        let tags: Vec<_> = parts.headers.get_all("x-tag").iter().collect();
        assert_eq!(tags, vec!["one", "two"]);
        assert_eq!(r.substituted, vec![0]);

        let other = Name::parse("other.test").unwrap();
        let mut parts = http::Request::builder().body(()).unwrap().into_parts().0;
        let r = rewrite(&mut parts, &other, &secrets, &rules);
        assert!(
            parts.headers.get("x-api-key").is_none(),
            "secret not for other.test"
        );
        assert!(r.violations[0].contains("not a request it is for"));
    }
}
