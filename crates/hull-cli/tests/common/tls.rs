//! A loopback HTTPS server standing for an API, for the credential-brokering tests: its own
//! test CA (given to the gateway's upstream trust), its names served by a loopback DNS server
//! of the test's, and a log of the `Host` and `Authorization` each request carried.

use std::io::BufRead;
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};

use super::net::Dns;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
};

pub const SERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 12);

/// The HTTPS server: records `Host` and `Authorization` of each request in `log`, and answers
/// the `Authorization` it got (an API that echoes what it was sent).
const SERVER_PY: &str = r#"
import http.server, ssl, sys
ip, cert, key, log = sys.argv[1:5]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        auth = self.headers.get('Authorization', '')
        with open(log, 'a') as f:
            f.write('%s %s\n' % (self.headers.get('Host', ''), auth))
        body = ('auth=%s' % auth).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer((ip, 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

pub struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test CA (PEM in `dir/test-ca.pem`) and the server's certificate for the names.
fn certs(dir: &std::path::Path) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Distinct names: OpenSSL (curl) takes a leaf whose issuer is its own subject for a
    // self-signed one.
    ca_params.distinguished_name = DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "hull brokering test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![
        "api.example.test".to_string(),
        "other.example.test".to_string(),
    ])
    .unwrap();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "api.example.test");
    let cert = params.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("test-ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
}

fn server(dir: &std::path::Path) -> Server {
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut child = Command::new(python)
        .args(["-c", SERVER_PY, &SERVER.to_string()])
        .arg(dir.join("server.pem"))
        .arg(dir.join("server.key"))
        .arg(dir.join("seen.log"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the HTTPS server");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().expect("the server's port");
    Server { child, port }
}

/// The test CA and server certificate (in `dir`, readable by a box's user), the HTTPS server,
/// its DNS name served on loopback, and a `HULL_HOME` of the test's own.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub srv: Server,
    /// Kept for its answers while the fixture lives.
    _dns: Dns,
    pub home: tempfile::TempDir,
    pub ca: String,
    pub dns_addr: String,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with_names(&["api.example.test"])
    }

    /// The same with these names served (each maps to the server's address).
    pub fn with_names(names: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        certs(dir.path());
        let srv = server(dir.path());
        let served: Vec<(&str, Ipv4Addr)> = names.iter().map(|n| (*n, SERVER)).collect();
        let dns = Dns::start(&served);
        let ca = dir.path().join("test-ca.pem").display().to_string();
        let dns_addr = dns.addr.to_string();
        Fixture {
            dir,
            srv,
            _dns: dns,
            home: tempfile::tempdir().unwrap(),
            ca,
            dns_addr,
        }
    }

    /// The gateway's resolver and upstream trust pointed at them, and the test's `HULL_HOME`.
    pub fn env(&self) -> Vec<(&str, &str)> {
        vec![
            ("HULL_NET_DNS", self.dns_addr.as_str()),
            ("HULL_NET_UPSTREAM_CA", self.ca.as_str()),
            ("HULL_HOME", self.home.path().to_str().unwrap()),
        ]
    }
}
