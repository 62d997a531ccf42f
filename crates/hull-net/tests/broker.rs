//! The credential broker end to end, over loopback only: a "box" (a rustls + hyper client
//! trusting the hull CA, over an in-memory pipe) talks through `intercept` to an HTTPS echo
//! server on 127.0.0.1 whose own test CA the broker's upstream trust is given.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hull_net::broker::{intercept, Broker, BrokerError, BrokerSpec, FlowStats};
use hull_net::ca::Ca;
use hull_net::reqlog::Record;
use hull_net::tls::{TlsError, UpstreamTls, UpstreamTrust};
use hull_net::Name;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REAL: &str = "sk-REAL-0123456789/abc+def xyz";
const API: &str = "api.example.test";
const OTHER: &str = "other.example.test";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn urlenc(s: &str) -> String {
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

/// The loopback HTTPS echo server and what it received.
struct Upstream {
    addr: SocketAddr,
    ca_der: CertificateDer<'static>,
    seen: Arc<Mutex<Vec<HeaderMap>>>,
}

async fn echo(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<HeaderMap>>>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    seen.lock().unwrap().push(req.headers().clone());
    let path = req.uri().path().to_string();
    if path == "/ws" {
        let mut req = req;
        let up = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(up) = up.await {
                let mut io = TokioIo::new(up);
                let mut buf = [0u8; 64];
                if let Ok(n) = io.read(&mut buf).await {
                    let _ = io.write_all(&buf[..n]).await;
                }
            }
        });
        return Ok(Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header("upgrade", "websocket")
            .header("connection", "upgrade")
            .body(Full::new(Bytes::new()))
            .unwrap());
    }
    if path == "/gzip" {
        return Ok(Response::builder()
            .header("content-encoding", "gzip")
            .body(Full::new(Bytes::from(format!("pretend gzip {REAL}"))))
            .unwrap());
    }
    let mut text = String::new();
    let mut echo_auth = None;
    for (k, v) in req.headers() {
        let v = v.to_str().unwrap_or("?");
        if k == "authorization" {
            echo_auth = Some(v.to_string());
        }
        text.push_str(&format!(
            "{k}: {v}\nb64 {k}: {}\nurl {k}: {}\n",
            b64(v),
            urlenc(v)
        ));
    }
    let body = req.into_body().collect().await.unwrap().to_bytes();
    text.push_str("body: ");
    text.push_str(&String::from_utf8_lossy(&body));
    let mut r = Response::builder().header("x-echo-path", path);
    if let Some(a) = echo_auth {
        r = r.header("x-echo-authorization", a);
    }
    Ok(r.body(Full::new(Bytes::from(text))).unwrap())
}

async fn upstream() -> Upstream {
    upstream_speaking(&[b"h2", b"http/1.1"]).await
}

async fn upstream_speaking(alpn: &[&[u8]]) -> Upstream {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![API.to_string(), OTHER.to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
    .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = seen2.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(
                        TokioIo::new(tls),
                        hyper::service::service_fn(move |r| echo(r, seen.clone())),
                    )
                    .await;
            });
        }
    });
    Upstream {
        addr,
        ca_der: ca.der().clone(),
        seen,
    }
}

type Log = Arc<Mutex<Vec<Record>>>;

fn broker(up: &Upstream, spec: serde_json::Value) -> (Broker, Log) {
    let spec: BrokerSpec = serde_json::from_value(spec).unwrap();
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    let trust = UpstreamTrust {
        public_roots: false,
        pems: Vec::new(),
        bundles: vec![],
        extra: vec![up.ca_der.clone()],
    };
    let b = Broker::new(
        spec,
        Arc::new(Ca::in_memory().unwrap()),
        UpstreamTls::new(&trust).unwrap(),
        Arc::new(move |r: &Record| log2.lock().unwrap().push(r.clone())),
    )
    .unwrap();
    (b, log)
}

fn default_spec() -> serde_json::Value {
    serde_json::json!({
        "secrets": [{"name": "openai", "value": REAL, "hosts": [API]}],
        "transformations": [{"match": {"hosts": [OTHER]}, "action": "add", "headers": {"x-via": "hull"}}]
    })
}

/// The box's side: a TLS client over an in-memory pipe, trusting only the hull CA.
async fn open_box(
    up: &Upstream,
    b: &Broker,
    flow_name: &str,
    sni: ServerName<'static>,
    alpn: &[&[u8]],
) -> (
    Result<tokio_rustls::client::TlsStream<tokio::io::DuplexStream>, std::io::Error>,
    tokio::task::JoinHandle<Result<FlowStats, BrokerError>>,
) {
    let (box_end, gw_end) = tokio::io::duplex(64 * 1024);
    let tcp = TcpStream::connect(up.addr).await.unwrap();
    let b2 = b.clone();
    let name = Name::parse(flow_name).unwrap();
    let flow = tokio::spawn(async move { intercept(gw_end, tcp, &name, &b2).await });
    let mut roots = rustls::RootCertStore::empty();
    roots.add(b.ca().cert_der().clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(sni, box_end)
        .await;
    (tls, flow)
}

enum BoxClient {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl BoxClient {
    async fn new(tls: tokio_rustls::client::TlsStream<tokio::io::DuplexStream>) -> BoxClient {
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        let io = TokioIo::new(tls);
        if h2 {
            let (s, c) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(c);
            BoxClient::H2(s)
        } else {
            let (s, c) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(c.with_upgrades());
            BoxClient::H1(s)
        }
    }

    async fn send(&mut self, req: Request<Full<Bytes>>) -> Response<Incoming> {
        match self {
            BoxClient::H1(s) => s.send_request(req).await.unwrap(),
            BoxClient::H2(s) => s.send_request(req).await.unwrap(),
        }
    }

    fn request(&self, host: &str, path: &str) -> http::request::Builder {
        match self {
            BoxClient::H1(_) => Request::builder().uri(path).header("host", host),
            BoxClient::H2(_) => Request::builder()
                .uri(format!("https://{host}{path}"))
                .version(http::Version::HTTP_2),
        }
    }
}

fn api() -> ServerName<'static> {
    ServerName::try_from(API).unwrap()
}

fn log_text(log: &Log) -> String {
    log.lock().unwrap().iter().map(Record::line).collect()
}

#[tokio::test]
async fn the_real_value_goes_upstream_and_never_back_over_h2_and_http11() {
    let up = upstream().await;
    let (b, log) = broker(&up, default_spec());
    let placeholder = b.secrets()[0].placeholder().to_string();
    for (alpn, want) in [
        (&[&b"h2"[..], b"http/1.1"][..], "h2"),
        (&[&b"http/1.1"[..]][..], "http/1.1"),
        // No ALPN at all: http/1.1 upstream, and none announced to the box.
        (&[][..], "http/1.1"),
    ] {
        up.seen.lock().unwrap().clear();
        let (tls, flow) = open_box(&up, &b, API, api(), alpn).await;
        let tls = tls.expect("the box trusts the hull CA's leaf");
        let announced = (!alpn.is_empty()).then_some(want.as_bytes());
        assert_eq!(tls.get_ref().1.alpn_protocol(), announced);
        let mut c = BoxClient::new(tls).await;
        let req = c
            .request(API, "/v1/chat?k=1")
            .method("POST")
            .header("authorization", format!("Bearer {placeholder}"))
            .header("x-note", placeholder.as_str())
            .header("accept-encoding", "gzip, br")
            .body(Full::new(Bytes::from("hello")))
            .unwrap();
        let resp = c.send(req).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["x-echo-authorization"],
            format!("Bearer {placeholder}").as_str(),
            "the echoed header is scrubbed"
        );
        let body = String::from_utf8(
            resp.into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap();
        for form in [
            REAL.to_string(),
            b64(REAL),
            urlenc(REAL),
            b64(&format!("Bearer {REAL}"))[10..30].to_string(),
        ] {
            assert!(
                !body.contains(&form),
                "{want}: {form} reached the box:\n{body}"
            );
        }
        assert!(
            body.contains(&format!("authorization: Bearer {placeholder}")),
            "{body}"
        );
        assert!(
            body.contains(&format!("url authorization: Bearer%20{placeholder}")),
            "{body}"
        );
        assert!(body.contains("body: hello"), "{body}");
        let seen = up.seen.lock().unwrap().pop().unwrap();
        assert_eq!(
            seen["authorization"],
            format!("Bearer {REAL}").as_str(),
            "{want}"
        );
        assert_eq!(
            seen["x-note"],
            placeholder.as_str(),
            "not a header the secret is for"
        );
        assert!(
            seen.get("accept-encoding").is_none(),
            "stripped on a secret's host"
        );
        drop(c);
        let stats = flow.await.unwrap().unwrap();
        assert_eq!(
            (stats.protocol, stats.requests, stats.substituted),
            (want, 1, 1)
        );
        assert!(stats.scrubbed >= 3, "{stats:?}");
    }
    let text = log_text(&log);
    assert!(!text.contains("sk-REAL"), "no value in the log:\n{text}");
    let recs = log.lock().unwrap().clone();
    assert_eq!(recs.len(), 3);
    for r in recs {
        let Record::Http {
            path,
            status,
            secrets,
            scrubbed,
            violations,
            ..
        } = r
        else {
            panic!("{r:?}")
        };
        assert_eq!((path.as_str(), status), ("/v1/chat", 200));
        assert_eq!(secrets, vec!["openai"]);
        assert_eq!(scrubbed, vec!["openai"]);
        assert!(violations[0].contains("header x-note"), "{violations:?}");
    }
}

#[tokio::test]
async fn a_placeholder_sent_to_another_host_is_left_as_is_and_logged() {
    let up = upstream().await;
    let (b, log) = broker(&up, default_spec());
    let placeholder = b.secrets()[0].placeholder().to_string();
    let other = Name::parse(OTHER).unwrap();
    assert!(b.wants_interception(&Name::parse(API).unwrap()));
    assert!(b.wants_interception(&other), "a transformation is for it");
    assert!(!b.wants_interception(&Name::parse("pypi.org").unwrap()));
    let (tls, flow) = open_box(
        &up,
        &b,
        OTHER,
        ServerName::try_from(OTHER).unwrap(),
        &[b"http/1.1"],
    )
    .await;
    let mut c = BoxClient::new(tls.unwrap()).await;
    let resp = c
        .send(
            c.request(OTHER, "/steal")
                .header("authorization", format!("Bearer {placeholder}"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let seen = up.seen.lock().unwrap().pop().unwrap();
    assert_eq!(
        seen["authorization"],
        format!("Bearer {placeholder}").as_str()
    );
    assert_eq!(seen["x-via"], "hull", "the transformation applied");
    drop(c);
    flow.await.unwrap().unwrap();
    let text = log_text(&log);
    assert!(
        text.contains("sent to other.example.test, not a host it is for"),
        "{text}"
    );
}

#[tokio::test]
async fn sni_other_than_the_name_or_none_is_refused() {
    let up = upstream().await;
    let (b, log) = broker(&up, default_spec());
    let (tls, flow) = open_box(
        &up,
        &b,
        API,
        ServerName::try_from(OTHER).unwrap(),
        &[b"http/1.1"],
    )
    .await;
    assert!(tls.is_err(), "the box gets no certificate");
    assert!(matches!(
        flow.await.unwrap(),
        Err(BrokerError::Tls(TlsError::SniMismatch { .. }))
    ));
    // An address as the server name: rustls sends no SNI at all.
    let (tls, flow) = open_box(
        &up,
        &b,
        API,
        ServerName::try_from("127.0.0.1").unwrap(),
        &[b"http/1.1"],
    )
    .await;
    assert!(tls.is_err());
    assert!(matches!(
        flow.await.unwrap(),
        Err(BrokerError::Tls(TlsError::SniMismatch { got: None, .. }))
    ));
    assert!(up.seen.lock().unwrap().is_empty());
    let text = log_text(&log);
    assert_eq!(text.matches("SNI mismatch").count(), 2, "{text}");
}

#[tokio::test]
async fn a_request_for_another_host_on_the_connection_gets_421() {
    let up = upstream().await;
    let (b, log) = broker(&up, default_spec());
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let (tls, flow) = open_box(&up, &b, API, api(), &[alpn]).await;
        let mut c = BoxClient::new(tls.unwrap()).await;
        let resp = c
            .send(c.request(OTHER, "/").body(Full::new(Bytes::new())).unwrap())
            .await;
        assert_eq!(resp.status(), StatusCode::MISDIRECTED_REQUEST);
        let ok = c
            .send(
                c.request(API, "/fine")
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await;
        assert_eq!(ok.status(), 200, "the right name still works");
        drop((resp, ok, c));
        assert_eq!(flow.await.unwrap().unwrap().misdirected, 1);
    }
    assert_eq!(
        up.seen.lock().unwrap().len(),
        2,
        "only the right requests arrived"
    );
    assert!(log_text(&log).contains("Host mismatch"));
}

#[tokio::test]
async fn an_encoded_response_that_cannot_be_scrubbed_is_refused() {
    let up = upstream().await;
    let (b, log) = broker(&up, default_spec());
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let (tls, flow) = open_box(&up, &b, API, api(), &[alpn]).await;
        let mut c = BoxClient::new(tls.unwrap()).await;
        let resp = c
            .send(
                c.request(API, "/gzip")
                    .body(Full::new(Bytes::new()))
                    .unwrap(),
            )
            .await;
        assert_eq!(resp.status(), StatusCode::BAD_GATEWAY);
        let h1 = alpn == b"http/1.1";
        assert_eq!(
            resp.headers().get("connection").is_some(),
            h1,
            "h1 is closed"
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(!String::from_utf8_lossy(&body).contains("sk-REAL"));
        drop(c);
        let stats = flow.await.unwrap().unwrap();
        assert_eq!(stats.violations, 1);
    }
    assert!(log_text(&log).contains("encoded as gzip cannot be scrubbed"));
}

#[tokio::test]
async fn a_websocket_upgrade_is_substituted_then_spliced() {
    let up = upstream().await;
    let (b, _log) = broker(&up, default_spec());
    let placeholder = b.secrets()[0].placeholder().to_string();
    let (tls, flow) = open_box(&up, &b, API, api(), &[b"http/1.1"]).await;
    let mut c = BoxClient::new(tls.unwrap()).await;
    let resp = c
        .send(
            c.request(API, "/ws")
                .header("authorization", format!("Bearer {placeholder}"))
                .header("connection", "upgrade")
                .header("upgrade", "websocket")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    let seen = up.seen.lock().unwrap().pop().unwrap();
    assert_eq!(seen["authorization"], format!("Bearer {REAL}").as_str());
    let mut io = TokioIo::new(hyper::upgrade::on(resp).await.unwrap());
    io.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    io.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");
    drop(io);
    drop(c);
    assert_eq!(flow.await.unwrap().unwrap().upgrades, 1);
}

/// curl, as a box's tools would connect: a loopback listener runs `intercept` for each
/// connection (the flow code's job in the gateway), curl trusts only the hull CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_through_the_broker_over_h2_and_http11() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        hull_testkit::skip("curl is not installed (scripts/setup.sh installs it)");
        return;
    }
    let up = upstream().await;
    let (b, _log) = broker(&up, default_spec());
    let placeholder = b.secrets()[0].placeholder().to_string();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("hull-ca.pem");
    std::fs::write(&ca, b.ca().cert_pem()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (b2, up_addr) = (b.clone(), up.addr);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let b = b2.clone();
            tokio::spawn(async move {
                let upstream = TcpStream::connect(up_addr).await.unwrap();
                let _ = intercept(tcp, upstream, &Name::parse(API).unwrap(), &b).await;
            });
        }
    });
    for flag in ["--http2", "--http1.1"] {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--max-time", "20", flag, "--cacert"])
            .arg(&ca)
            .arg("--resolve")
            .arg(format!("{API}:{port}:127.0.0.1"))
            .arg("-H")
            .arg(format!("Authorization: Bearer {placeholder}"))
            .arg("-D")
            .arg("-")
            .arg(format!("https://{API}:{port}/curl"))
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains("sk-REAL"), "{flag}: {text}");
        assert!(
            text.contains(&format!("authorization: Bearer {placeholder}")),
            "{flag}: {text}"
        );
        let seen = up.seen.lock().unwrap().pop().unwrap();
        assert_eq!(
            seen["authorization"],
            format!("Bearer {REAL}").as_str(),
            "{flag}"
        );
    }
}

#[tokio::test]
async fn a_real_host_whose_chain_does_not_verify_gets_nothing() {
    let up = upstream().await;
    let spec: BrokerSpec = serde_json::from_value(default_spec()).unwrap();
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    // Public roots only: the loopback server's test CA is not among them.
    let b = Broker::new(
        spec,
        Arc::new(Ca::in_memory().unwrap()),
        UpstreamTls::new(&UpstreamTrust::default()).unwrap(),
        Arc::new(move |r: &Record| log2.lock().unwrap().push(r.clone())),
    )
    .unwrap();
    let (tls, flow) = open_box(&up, &b, API, api(), &[b"http/1.1"]).await;
    assert!(tls.is_err(), "the box's handshake is never finished");
    assert!(matches!(
        flow.await.unwrap(),
        Err(BrokerError::Tls(TlsError::Upstream { .. }))
    ));
    assert!(up.seen.lock().unwrap().is_empty(), "no request reached it");
    assert!(log_text(&log).contains("TLS to api.example.test"));
}

#[tokio::test]
async fn an_h2_only_box_reaches_an_http11_only_host() {
    let up = upstream_speaking(&[b"http/1.1"]).await;
    let (b, _log) = broker(&up, default_spec());
    let placeholder = b.secrets()[0].placeholder().to_string();
    let (tls, flow) = open_box(&up, &b, API, api(), &[b"h2"]).await;
    let tls = tls.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut c = BoxClient::new(tls).await;
    let resp = c
        .send(
            c.request(API, "/mixed")
                .header("authorization", format!("Bearer {placeholder}"))
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(!String::from_utf8_lossy(&body).contains("sk-REAL"));
    let seen = up.seen.lock().unwrap().pop().unwrap();
    assert_eq!(seen["authorization"], format!("Bearer {REAL}").as_str());
    assert_eq!(seen["host"], API, "h1 upstream gets Host from :authority");
    drop(c);
    assert_eq!(flow.await.unwrap().unwrap().protocol, "h2");
}

/// One request to OTHER with `x-api-key: key`, answered 200.
async fn send_key(c: &mut BoxClient, key: &str) {
    let req = c
        .request(OTHER, "/k")
        .header("x-api-key", key)
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(c.send(req).await.status(), 200);
}

#[tokio::test]
async fn replaced_rules_apply_to_the_next_request_and_keep_the_secrets() {
    let up = upstream().await;
    let (b, _log) = broker(&up, default_spec());
    let placeholder = b.secrets()[0].placeholder().to_string();
    let other = Name::parse(OTHER).unwrap();
    let rule = |value: &str| -> hull_net::rules::TransformSpec {
        serde_json::from_value(serde_json::json!({
            "match": {"hosts": [OTHER], "headers": {"x-api-key": "aisdkhc_box"}},
            "headers": {"x-api-key": value}
        }))
        .unwrap()
    };
    // A rule for OTHER that sets a header, matched on the value the box sent.
    b.set_rules(vec![rule("real-literal")]).unwrap();
    assert_eq!(
        b.secrets()[0].placeholder(),
        placeholder,
        "the secrets are kept"
    );
    assert!(b.wants_interception(&other));
    let (tls, flow) = open_box(
        &up,
        &b,
        OTHER,
        ServerName::try_from(OTHER).unwrap(),
        &[b"http/1.1"],
    )
    .await;
    let mut c = BoxClient::new(tls.unwrap()).await;
    send_key(&mut c, "aisdkhc_box").await;
    let seen = up.seen.lock().unwrap().pop().unwrap();
    assert_eq!(seen["x-api-key"], "real-literal");
    assert!(
        seen.get("x-via").is_none(),
        "the replaced rule still applied"
    );
    send_key(&mut c, "something-else").await;
    assert_eq!(
        up.seen.lock().unwrap().pop().unwrap()["x-api-key"],
        "something-else"
    );
    // Replaced while the connection stays open: its next request takes the new value, and
    // with no rules at all, none.
    b.set_rules(vec![rule("rotated")]).unwrap();
    send_key(&mut c, "aisdkhc_box").await;
    assert_eq!(
        up.seen.lock().unwrap().pop().unwrap()["x-api-key"],
        "rotated"
    );
    b.set_rules(Vec::new()).unwrap();
    send_key(&mut c, "aisdkhc_box").await;
    assert_eq!(
        up.seen.lock().unwrap().pop().unwrap()["x-api-key"],
        "aisdkhc_box"
    );
    drop(c);
    flow.await.unwrap().unwrap();
    assert!(!b.wants_interception(&other));
    // A rule naming an unknown secret is refused, and nothing changes.
    b.set_rules(vec![rule("kept")]).unwrap();
    let bad = b.set_rules(vec![serde_json::from_value(serde_json::json!({
        "match": {"hosts": [OTHER]},
        "headers": {"authorization": {"secret": "nope"}}
    }))
    .unwrap()]);
    assert!(
        matches!(bad, Err(hull_net::broker::BrokerError::Rule(_))),
        "{bad:?}"
    );
    assert!(
        b.wants_interception(&other),
        "a refused set changed the rules"
    );
    // A literal that is no header value is refused without being quoted (it can be a key).
    let bad = b
        .set_rules(vec![serde_json::from_value(serde_json::json!({
            "match": {"hosts": [OTHER]},
            "headers": {"x-api-key": "sk-LEAK\nME"}
        }))
        .unwrap()])
        .unwrap_err();
    let shown = bad.to_string();
    assert!(
        shown.contains("x-api-key") && !shown.contains("LEAK"),
        "{shown}"
    );
}
