//! The broker's log: one JSON line per intercepted request (method, host, path without its
//! query, status, the secrets put in and scrubbed out by name, what was refused) and per
//! refused TLS handshake. Like `log.rs`, the records have no field a header value, a query
//! or a secret's value could reach: secrets appear by name, violations are the broker's words.

use serde::Serialize;

/// One line of the broker's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A request the box sent through an intercepted connection.
    Http {
        at_ms: u64,
        host: String,
        method: String,
        /// The path only: a query can carry anything.
        path: String,
        /// `h2` or `http/1.1`.
        protocol: &'static str,
        /// The status the box got (the upstream's, or the broker's own 421/502).
        status: u16,
        /// Secrets whose real value went upstream, by name.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        secrets: Vec<String>,
        /// Secrets found in the response and replaced by their placeholder, by name.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        scrubbed: Vec<String>,
        /// What brokering refused to honour or had to stop.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        violations: Vec<String>,
    },
    /// An intercepted connection refused before any request.
    Tls {
        at_ms: u64,
        host: String,
        reason: String,
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

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_record_is_one_line_naming_secrets_not_values() {
        let r = Record::Http {
            at_ms: 5,
            host: "api.example.test".into(),
            method: "POST".into(),
            path: "/v1/chat".into(),
            protocol: "h2",
            status: 200,
            secrets: vec!["openai".into()],
            scrubbed: vec![],
            violations: vec![],
        };
        let line = r.line();
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["kind"], "http");
        assert_eq!(v["secrets"][0], "openai");
        assert!(v.get("scrubbed").is_none());
    }
}
