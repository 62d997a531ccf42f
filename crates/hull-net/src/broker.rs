//! The credential broker: what the gateway does with a box connection to a host that carries a
//! secret or a transformation. It terminates the box's TLS with a leaf from the gateway CA
//! (after checking SNI), opens TLS to the real host (same ALPN), and relays HTTP (h2 or
//! http/1.1) request by request: `Host`/`:authority` must be the name (else 421), requests are
//! rewritten (`rewrite`), responses scrubbed (`scrub`), and each request is logged (`reqlog`).
//! An h1 `Upgrade` (WebSocket) is rewritten in its handshake and then spliced.

use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;

use crate::ca::Ca;
use crate::name::Name;
use crate::reqlog::{now_ms, Record};
use crate::rewrite::rewrite;
use crate::rules::{RuleError, Transform, TransformSpec};
use crate::scrub::{BoxError, Needles, ScrubBody};
use crate::secret::{Secret, SecretError, SecretSpec};
use crate::tls::{self, TlsError, UpstreamTls, H2, HTTP11};

/// The body type relayed both ways.
pub type Body = BoxBody<Bytes, BoxError>;

/// Where the broker's log records go.
pub type LogSink = Arc<dyn Fn(&Record) + Send + Sync>;

/// The brokering a caller asks for (JSON from the CLI or an SDK):
/// `{"secrets": [SecretSpec...], "transformations": [TransformSpec...]}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerSpec {
    #[serde(default)]
    pub secrets: Vec<SecretSpec>,
    #[serde(default)]
    pub transformations: Vec<TransformSpec>,
}

/// Why brokering could not be set up, or a connection ended in error.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error("secret `{0}` is given twice")]
    DuplicateSecret(String),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("HTTP/2 or HTTP/1.1 with {name}")]
    UpstreamHttp {
        name: String,
        #[source]
        source: hyper::Error,
    },
    #[error("the box's HTTP connection")]
    BoxHttp(#[source] BoxError),
}

/// What one intercepted connection carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// `h2` or `http/1.1`, as the box spoke it.
    pub protocol: &'static str,
    pub requests: u64,
    /// Requests into which at least one real value was put.
    pub substituted: u64,
    /// Replacements made in responses (headers and bodies).
    pub scrubbed: u64,
    /// Violations logged.
    pub violations: u64,
    /// Requests refused with 421 (wrong `Host`).
    pub misdirected: u64,
    /// Upgraded connections spliced.
    pub upgrades: u64,
}

/// The broker: secrets, transformations, the CA and the upstream TLS client. Cheap to clone.
#[derive(Clone)]
pub struct Broker(Arc<Inner>);

struct Inner {
    ca: Arc<Ca>,
    upstream: UpstreamTls,
    secrets: Vec<Secret>,
    /// Replaced whole by [`Broker::set_rules`]; each request takes the rules of its moment.
    rules: std::sync::RwLock<Arc<Vec<Transform>>>,
    log: LogSink,
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("secrets", &self.0.secrets)
            .field("rules", &self.rules().len())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// Checks `spec` and makes each secret's placeholder.
    pub fn new(
        spec: BrokerSpec,
        ca: Arc<Ca>,
        upstream: UpstreamTls,
        log: LogSink,
    ) -> Result<Broker, BrokerError> {
        let mut secrets: Vec<Secret> = Vec::with_capacity(spec.secrets.len());
        for s in spec.secrets {
            if secrets.iter().any(|have| have.name() == s.name) {
                return Err(BrokerError::DuplicateSecret(s.name));
            }
            secrets.push(Secret::new(s)?);
        }
        let b = Broker(Arc::new(Inner {
            ca,
            upstream,
            secrets,
            rules: std::sync::RwLock::new(Arc::new(Vec::new())),
            log,
        }));
        b.set_rules(spec.transformations)?;
        Ok(b)
    }

    /// Replaces the request transformations (the secrets, their placeholders, the CA and the
    /// log stay): every request from now on, on connections already open too, is rewritten by
    /// the new rules; a connection is intercepted or not as its host wanted when it opened.
    /// Checked whole first: on an error nothing changes.
    pub fn set_rules(&self, transformations: Vec<TransformSpec>) -> Result<(), BrokerError> {
        let secrets = &self.0.secrets;
        let rules = transformations
            .into_iter()
            .enumerate()
            .map(|(i, t)| Transform::new(i, t, |n| secrets.iter().position(|s| s.name() == n)))
            .collect::<Result<Vec<_>, _>>()?;
        *self
            .0
            .rules
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(rules);
        Ok(())
    }

    /// The rules of this moment.
    fn rules(&self) -> Arc<Vec<Transform>> {
        Arc::clone(
            &self
                .0
                .rules
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The secrets, with their placeholders (what the caller puts in the box's environment).
    pub fn secrets(&self) -> &[Secret] {
        &self.0.secrets
    }

    /// The CA whose certificate a box must trust.
    pub fn ca(&self) -> &Ca {
        &self.0.ca
    }

    /// Whether a connection to `name` is intercepted (a secret or a transformation is for
    /// it); every other connection is spliced untouched.
    pub fn wants_interception(&self, name: &Name) -> bool {
        self.0.secrets.iter().any(|s| s.is_for(name)) || self.rules().iter().any(|r| r.is_for(name))
    }

    fn log(&self, r: &Record) {
        (self.0.log)(r)
    }
}

/// Intercepts one box connection to `name` whose upstream TCP connection is already open (see
/// the module comment). Returns when the box's connection (and any splice) is done.
pub async fn intercept<B, U>(
    box_side: B,
    upstream: U,
    name: &Name,
    broker: &Broker,
) -> Result<FlowStats, BrokerError>
where
    B: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let refuse = |e: TlsError| {
        broker.log(&Record::Tls {
            at_ms: now_ms(),
            host: name.to_string(),
            reason: error_chain(&e),
        });
        BrokerError::Tls(e)
    };
    let hello = tls::read_hello(box_side, name).await.map_err(refuse)?;
    // The box's offer, with http/1.1 added when it offered only h2 so a host without h2 still
    // answers (hyper relays between them); never h2 added to an http/1.1 box, whose `Upgrade`
    // needs http/1.1 on both sides.
    let mut offer: Vec<&[u8]> = hello.alpn.clone();
    if !offer.contains(&HTTP11) {
        offer.push(HTTP11);
    }
    let up_tls = tokio::time::timeout(
        tls::FIRST_FLIGHT,
        broker.0.upstream.connect(upstream, name, &offer),
    )
    .await
    .map_err(|_| refuse(TlsError::UpstreamTimeout(name.to_string())))?
    .map_err(refuse)?;
    let is_h2 = up_tls.get_ref().1.alpn_protocol() == Some(H2);
    let up_proto = if is_h2 { H2 } else { HTTP11 };
    // The box gets the host's protocol when it offered it, else its own first choice (hyper
    // relays h2 to http/1.1 and back).
    let box_alpn = match hello.alpn.first() {
        None => None,
        Some(_) if hello.alpn.contains(&up_proto) => Some(up_proto),
        Some(first) => Some(*first),
    };
    let box_h2 = box_alpn == Some(H2);
    let box_tls = tls::accept_box(hello, &broker.0.ca, name, box_alpn)
        .await
        .map_err(refuse)?;
    let up_err = |source| BrokerError::UpstreamHttp {
        name: name.to_string(),
        source,
    };
    let (sender, driver): (Sender, JoinHandle<()>) = if is_h2 {
        let (s, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(up_tls))
                .await
                .map_err(up_err)?;
        (Sender::H2(s), tokio::spawn(async move { drop(conn.await) }))
    } else {
        let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(up_tls))
            .await
            .map_err(up_err)?;
        (
            Sender::H1(tokio::sync::Mutex::new(s)),
            tokio::spawn(async move { drop(conn.with_upgrades().await) }),
        )
    };
    let flow = Arc::new(Flow {
        broker: broker.clone(),
        name: name.clone(),
        protocol: if box_h2 { "h2" } else { "http/1.1" },
        sender,
        stats: Mutex::new(FlowStats {
            protocol: if box_h2 { "h2" } else { "http/1.1" },
            ..FlowStats::default()
        }),
        splices: Mutex::new(Vec::new()),
    });
    let mut server = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    server.http1().timer(TokioTimer::new());
    let server = if box_h2 {
        server.http2_only()
    } else {
        server.http1_only()
    };
    let svc_flow = flow.clone();
    let served = server
        .serve_connection_with_upgrades(
            TokioIo::new(box_tls),
            hyper::service::service_fn(move |req| handle(req, svc_flow.clone())),
        )
        .await;
    let splices = std::mem::take(&mut *lock(&flow.splices));
    for s in splices {
        let _ = s.await;
    }
    driver.abort();
    let stats = lock(&flow.stats).clone();
    match served {
        Ok(()) => Ok(stats),
        // A box that goes away without closing TLS or HTTP politely has still ended its flow.
        Err(e) if closed_abruptly(&*e) => Ok(stats),
        Err(e) => Err(BrokerError::BoxHttp(e)),
    }
}

/// The upstream half of an intercepted connection.
enum Sender {
    /// One request at a time, as h1 is.
    H1(tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Body>>),
    H2(hyper::client::conn::http2::SendRequest<Body>),
}

struct Flow {
    broker: Broker,
    name: Name,
    protocol: &'static str,
    sender: Sender,
    stats: Mutex<FlowStats>,
    splices: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Headers that describe one hop, not the message (RFC 9110 7.6.1).
const HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TE,
];

fn strip_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|h| !(keep_upgrade && *h == header::UPGRADE))
        .collect();
    let trailers_te = headers
        .get(header::TE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"trailers"));
    for h in listed {
        headers.remove(h);
    }
    for h in HOP.iter() {
        if keep_upgrade && (*h == header::UPGRADE || *h == header::CONNECTION) {
            continue;
        }
        headers.remove(h);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
    if trailers_te {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// The broker's own response; `close` (h1 only: h2 has no `Connection`) ends the connection
/// after it.
fn full(status: StatusCode, text: &'static str, close: bool) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from_static(text.as_bytes()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    if close {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// The host a request names, with any port dropped: from the URI (h2 `:authority`, an h1
/// absolute form) and from `Host`. Every one present must be the connection's name.
fn names_ok(parts: &http::request::Parts, name: &Name) -> Result<(), String> {
    let mut seen = Vec::new();
    if let Some(h) = parts.uri.host() {
        seen.push(h.to_string());
    }
    if let Some(h) = parts.headers.get(header::HOST) {
        let h = h.to_str().map_err(|_| "an unreadable Host".to_string())?;
        let host = match h.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => h,
        };
        seen.push(host.to_string());
    }
    if seen.is_empty() {
        return Err("no Host".into());
    }
    for h in seen {
        if Name::parse(&h).ok().as_ref() != Some(name) {
            return Err(format!(
                "Host mismatch: the request names {} on a connection to {name}",
                h.chars()
                    .filter(|c| c.is_ascii_graphic())
                    .take(253)
                    .collect::<String>()
            ));
        }
    }
    Ok(())
}

/// Fills in the log record of one request and emits it when dropped: with the response when
/// nothing is scrubbed, else when the scrubbed body is done.
struct PendingRecord {
    broker: Broker,
    record: Record,
}

impl Drop for PendingRecord {
    fn drop(&mut self) {
        self.broker.log(&self.record);
    }
}

async fn handle(req: Request<Incoming>, flow: Arc<Flow>) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = req.into_parts();
    let secrets = flow.broker.secrets();
    lock(&flow.stats).requests += 1;
    let mut record = Record::Http {
        at_ms: now_ms(),
        host: flow.name.to_string(),
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        protocol: flow.protocol,
        status: 0,
        secrets: Vec::new(),
        scrubbed: Vec::new(),
        violations: Vec::new(),
    };
    let Record::Http {
        status,
        secrets: sent,
        scrubbed: _,
        violations,
        ..
    } = &mut record
    else {
        unreachable!("built as Http above")
    };
    if let Err(why) = names_ok(&parts, &flow.name) {
        *status = 421;
        violations.push(why);
        {
            let mut st = lock(&flow.stats);
            st.misdirected += 1;
            st.violations += 1;
        }
        flow.broker.log(&record);
        return Ok(full(
            StatusCode::MISDIRECTED_REQUEST,
            "hull: this connection serves only the name it was opened to\n",
            false,
        ));
    }
    let upgrade = parts.headers.contains_key(header::UPGRADE)
        && matches!(flow.sender, Sender::H1(_))
        && parts.headers.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.to_ascii_lowercase().contains("upgrade"))
        });
    let box_upgrade = if upgrade {
        parts.extensions.remove::<OnUpgrade>()
    } else {
        None
    };
    let rw = rewrite(&mut parts, &flow.name, secrets, &flow.broker.rules());
    sent.extend(
        rw.substituted
            .iter()
            .map(|i| secrets[*i].name().to_string()),
    );
    violations.extend(rw.violations.iter().cloned());
    {
        let mut st = lock(&flow.stats);
        st.substituted += u64::from(!rw.substituted.is_empty());
        st.violations += rw.violations.len() as u64;
    }
    strip_hop(&mut parts.headers, upgrade);
    let is_head = parts.method == http::Method::HEAD;
    // The URI form each protocol wants: h2 carries the authority in the URI, h1 in `Host`.
    let authority = parts
        .uri
        .authority()
        .map(|a| a.to_string())
        .or_else(|| {
            parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_else(|| flow.name.to_string());
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let uri = match flow.sender {
        Sender::H2(_) => {
            parts.headers.remove(header::HOST);
            format!("https://{authority}{pq}")
        }
        Sender::H1(_) => {
            if let Ok(v) = HeaderValue::from_str(&authority) {
                parts.headers.insert(header::HOST, v);
            }
            pq
        }
    };
    match uri.parse() {
        Ok(u) => parts.uri = u,
        Err(_) => {
            *status = 400;
            flow.broker.log(&record);
            return Ok(full(
                StatusCode::BAD_REQUEST,
                "hull: bad request target\n",
                false,
            ));
        }
    }
    parts.version = http::Version::default();
    let up_req = Request::from_parts(parts, body.map_err(BoxError::from).boxed());
    let sent_res = match &flow.sender {
        Sender::H2(s) => {
            let mut s = s.clone();
            s.send_request(up_req).await
        }
        Sender::H1(m) => {
            let mut s = m.lock().await;
            match s.ready().await {
                Ok(()) => s.send_request(up_req).await,
                Err(e) => Err(e),
            }
        }
    };
    let resp = match sent_res {
        Ok(r) => r,
        Err(_) => {
            *status = 502;
            flow.broker.log(&record);
            return Ok(full(
                StatusCode::BAD_GATEWAY,
                "hull: the upstream failed\n",
                true,
            ));
        }
    };
    let (mut rparts, rbody) = resp.into_parts();
    *status = rparts.status.as_u16();
    let needles = Needles::new(rw.scrub.iter().map(|i| (*i, &secrets[*i])));
    let name_of = |hits: &[usize]| -> Vec<String> {
        hits.iter()
            .map(|i| secrets[*i].name().to_string())
            .collect()
    };
    let header_hits = needles.scrub_headers(&mut rparts.headers);
    lock(&flow.stats).scrubbed += header_hits.len() as u64;
    if let Record::Http { scrubbed, .. } = &mut record {
        for n in name_of(&header_hits) {
            if !scrubbed.contains(&n) {
                scrubbed.push(n);
            }
        }
    }
    let is_upgrade = rparts.status == StatusCode::SWITCHING_PROTOCOLS;
    if is_upgrade {
        if let (Some(box_up), Some(up_up)) = (box_upgrade, rparts.extensions.remove::<OnUpgrade>())
        {
            lock(&flow.stats).upgrades += 1;
            let task = tokio::spawn(async move {
                if let (Ok(b), Ok(u)) = (box_up.await, up_up.await) {
                    let _ =
                        tokio::io::copy_bidirectional(&mut TokioIo::new(b), &mut TokioIo::new(u))
                            .await;
                }
            });
            lock(&flow.splices).push(task);
        }
        strip_hop(&mut rparts.headers, true);
        flow.broker.log(&record);
        return Ok(Response::from_parts(
            rparts,
            rbody.map_err(BoxError::from).boxed(),
        ));
    }
    strip_hop(&mut rparts.headers, false);
    if needles.is_empty() {
        flow.broker.log(&record);
        return Ok(Response::from_parts(
            rparts,
            rbody.map_err(BoxError::from).boxed(),
        ));
    }
    let encoded = rparts
        .headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty() && v != "identity");
    if let Some(enc) = encoded {
        if rw.scrub.iter().all(|i| secrets[*i].reflect_ok()) {
            if let Record::Http { violations, .. } = &mut record {
                violations.push(format!(
                    "response encoded as {enc} passed unscrubbed (every secret for this host is reflect_ok)"
                ));
            }
            lock(&flow.stats).violations += 1;
            flow.broker.log(&record);
            return Ok(Response::from_parts(
                rparts,
                rbody.map_err(BoxError::from).boxed(),
            ));
        }
        if let Record::Http {
            violations, status, ..
        } = &mut record
        {
            violations.push(format!(
                "response encoded as {enc} cannot be scrubbed: refused and the connection closed"
            ));
            *status = 502;
        }
        lock(&flow.stats).violations += 1;
        flow.broker.log(&record);
        drop(rbody);
        return Ok(full(
            StatusCode::BAD_GATEWAY,
            "hull: the upstream sent a response it could not scrub\n",
            flow.protocol != "h2",
        ));
    }
    if !(is_head
        || rparts.status == StatusCode::NOT_MODIFIED
        || rparts.status == StatusCode::NO_CONTENT)
    {
        // Scrubbing changes the length.
        rparts.headers.remove(header::CONTENT_LENGTH);
    }
    let mut pending = PendingRecord {
        broker: flow.broker.clone(),
        record,
    };
    let names: Vec<String> = secrets.iter().map(|s| s.name().to_string()).collect();
    let stats_flow = flow.clone();
    let body = ScrubBody::new(
        rbody,
        needles,
        Box::new(move |hits: &[usize]| {
            lock(&stats_flow.stats).scrubbed += hits.len() as u64;
            if let Record::Http { scrubbed, .. } = &mut pending.record {
                for i in hits {
                    if !scrubbed.contains(&names[*i]) {
                        scrubbed.push(names[*i].clone());
                    }
                }
            }
        }),
    );
    Ok(Response::from_parts(rparts, body.boxed()))
}

fn closed_abruptly(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::NotConnected
            ) {
                return true;
            }
        }
        cur = c.source();
    }
    false
}

/// An error and its causes, as one line (for a log record).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
