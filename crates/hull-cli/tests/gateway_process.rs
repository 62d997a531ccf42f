//! The gateway network end to end, below the CLI: a real box (`Network::Gateway`) whose TAP is
//! served by a real `hull __net` process, with a loopback DNS server (the gateway's `dns`) and
//! loopback servers as the only upstreams. Root and unprivileged. Nothing leaves the host:
//! names resolve only to 127.0.0.x, and refused destinations are refused by the gateway before
//! any dial.

mod common;

use common::net::{Dns, Echo};

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use hull_box::{BoxSpec, Handoff, Network, NoSink, RunOptions, RunResult, Runtime, Tap};
use hull_cli::net::spawn::GatewayProcess;
use hull_cli::net::wire::{PolicySpec, Start};

/// The policy the tests start from: `api.example.test` (and `*.svc.example.test`) allowed, the
/// test servers' loopback address opened by an allowed CIDR (loopback is always denied
/// otherwise).
fn custom(hosts: &[&str], allow: &[&str], deny: &[&str]) -> PolicySpec {
    PolicySpec {
        mode: "custom".into(),
        allow_hosts: hosts.iter().map(|s| s.to_string()).collect(),
        allow_cidrs: allow.iter().map(|s| s.to_string()).collect(),
        deny_cidrs: deny.iter().map(|s| s.to_string()).collect(),
    }
}

/// Runs python `code` in a gateway box whose gateway starts with `policy`, resolving through
/// `dns`, with the host directory `flag` at `/flag`; `during` gets the gateway on a thread of
/// its own once it serves (while the program runs) and gives it back.
fn run_served(
    code: &str,
    policy: PolicySpec,
    dns: &Dns,
    max: usize,
    flag: Option<&std::path::Path>,
    during: Option<Box<dyn FnOnce(GatewayProcess) -> GatewayProcess + Send>>,
) -> RunResult {
    run_published(code, policy, dns, max, flag, &[], during)
}

/// [`run_served`] with the box's `ports` published.
fn run_published(
    code: &str,
    policy: PolicySpec,
    dns: &Dns,
    max: usize,
    flag: Option<&std::path::Path>,
    ports: &[u16],
    during: Option<Box<dyn FnOnce(GatewayProcess) -> GatewayProcess + Send>>,
) -> RunResult {
    let rt = Runtime::new().expect("runtime");
    let mut spec = BoxSpec::new(vec!["python3".into(), "-c".into(), code.into()]);
    spec.network = Network::Gateway;
    spec.timeout = Duration::from_secs(30);
    if let Some(f) = flag {
        spec.mounts.push(hull_box::BindMount {
            source: f.to_path_buf(),
            target: "/flag".into(),
            read_only: false,
        });
    }
    let start = Start {
        policy,
        ports: ports.to_vec(),
        max_tcp_connections: max,
        mtu: hull_box::tap::MTU as usize,
        dns: vec![dns.addr],
        broker: None,
        ca_dir: None,
        upstream_pems: Vec::new(),
        ca_files: Default::default(),
        proxy: None,
    };
    let mut during = during;
    let mut held: Option<std::thread::JoinHandle<GatewayProcess>> = None;
    let mut gateway = None;
    let mut take = |tap: Tap| {
        let log = std::env::var_os("HULL_TEST_NET_LOG").map(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .expect("the log")
        });
        let g = GatewayProcess::start_with(&common::bin(), tap.fd, &start, log)
            .map_err(|e| std::io::Error::other(hull_api::Chain(&e).to_string()))?;
        match during.take() {
            Some(f) => held = Some(std::thread::spawn(move || f(g))),
            None => gateway = Some(g),
        }
        Ok(())
    };
    let r = rt
        .run_with(
            &spec,
            RunOptions { capture: true },
            &mut NoSink,
            Handoff {
                fuse: None,
                tap: Some(&mut take),
            },
        )
        .expect("box runs");
    if let Some(h) = held {
        drop(h.join().expect("the test's thread"));
    }
    drop(gateway);
    r
}

/// Waits until `path` exists (the box wrote it).
fn wait_for(path: &std::path::Path) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{} never came",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Python: `connect(host, port)` prints what happened to a connection and its first line.
const CONNECT: &str = r#"
import socket, sys
def connect(host, port):
    try:
        addr = socket.gethostbyname(host)
    except socket.gaierror as e:
        print(host, 'NAME', e.errno); return
    try:
        s = socket.create_connection((addr, port), timeout=10)
        s.sendall(b'hi\n')
        print(host, 'GOT', s.makefile().readline().strip(), addr.startswith('198.18.') or addr.startswith('198.19.'))
    except OSError as e:
        print(host, 'REFUSED' if isinstance(e, ConnectionRefusedError) else 'ERR', e.errno)
"#;

#[test]
fn allowed_names_reach_their_servers_and_everything_else_is_refused_before_any_dial() {
    let server = Ipv4Addr::new(127, 0, 0, 7);
    let echo = Echo::start(server);
    let dns = Dns::start(&[
        ("api.example.test", server),
        ("a.svc.example.test", server),
        ("rebind.example.test", Ipv4Addr::new(127, 0, 0, 1)),
        ("private.example.test", Ipv4Addr::new(10, 0, 0, 1)),
        ("metadata.example.test", Ipv4Addr::new(169, 254, 169, 254)),
    ]);
    let port = echo.addr.port();
    let code = format!(
        "{CONNECT}\nfor h in ['api.example.test', 'API.Example.Test.', 'a.svc.example.test', 'svc.example.test', 'evilexample.test', 'denied.example.test', 'rebind.example.test', 'private.example.test', 'metadata.example.test']:\n    connect(h, {port})\n"
    );
    let r = run_served(
        &code,
        custom(
            &[
                "api.example.test",
                "*.svc.example.test",
                "rebind.example.test",
                "private.example.test",
                "metadata.example.test",
            ],
            &["127.0.0.7/32"],
            &[],
        ),
        &dns,
        1024,
        None,
        None,
    );
    let out = &r.stdout;
    assert!(r.success, "{r:?}");
    // Allowed: a synthetic address, then the real server through the gateway.
    assert!(
        out.contains("api.example.test GOT echo: hi True\n"),
        "{out}"
    );
    assert!(
        out.contains("API.Example.Test. GOT echo: hi True\n"),
        "{out}"
    );
    assert!(
        out.contains("a.svc.example.test GOT echo: hi True\n"),
        "{out}"
    );
    // A wildcard is not its apex, nor a name that merely ends the same; a name not allowed is
    // NXDOMAIN, and the host never resolved any of them.
    for h in [
        "svc.example.test",
        "evilexample.test",
        "denied.example.test",
    ] {
        assert!(out.contains(&format!("{h} NAME ")), "{h}: {out}");
        assert_eq!(dns.asked(h), 0, "{h} was resolved on the host");
    }
    // Allowed names whose answers are loopback, private or metadata: refused at connect
    // (rebinding), so the box sees a refusal, and nothing was dialled.
    for h in [
        "rebind.example.test",
        "private.example.test",
        "metadata.example.test",
    ] {
        assert!(out.contains(&format!("{h} REFUSED ")), "{h}: {out}");
    }
    assert_eq!(echo.accepted(), 3, "{out}");
}

#[test]
fn a_denied_cidr_wins_over_an_allowed_name_and_the_cap_resets_extra_connections() {
    let server = Ipv4Addr::new(127, 0, 0, 8);
    let echo = Echo::start(server);
    let dns = Dns::start(&[("api.example.test", server)]);
    let port = echo.addr.port();
    let r = run_served(
        &format!("{CONNECT}\nconnect('api.example.test', {port})\n"),
        custom(&["api.example.test"], &["127.0.0.8/32"], &["127.0.0.8/32"]),
        &dns,
        1024,
        None,
        None,
    );
    assert!(r.stdout.contains("api.example.test REFUSED "), "{r:?}");
    assert_eq!(echo.accepted(), 0);
    // Two live connections at most: the third is reset, the first two are served.
    let code = format!(
        "{CONNECT}\nimport socket\nheld = []\nfor i in range(3):\n    try:\n        s = socket.create_connection((socket.gethostbyname('api.example.test'), {port}), timeout=10)\n        s.sendall(b'x\\n'); held.append(s); print('OPEN', s.makefile().readline().strip())\n    except ConnectionRefusedError:\n        print('RESET')\n"
    );
    let r = run_served(
        &code,
        custom(&["api.example.test"], &["127.0.0.8/32"], &[]),
        &dns,
        2,
        None,
        None,
    );
    assert_eq!(r.stdout, "OPEN echo: x\nOPEN echo: x\nRESET\n", "{r:?}");
}

#[test]
fn a_policy_replaced_while_the_box_runs_judges_its_next_connection() {
    let server = Ipv4Addr::new(127, 0, 0, 9);
    let echo = Echo::start(server);
    let dns = Dns::start(&[("api.example.test", server)]);
    let port = echo.addr.port();
    let flag = tempfile::tempdir().expect("a directory");
    let code = format!(
        "{CONNECT}\nimport os, time\nconnect('api.example.test', {port})\nopen('/flag/asked', 'w').close()\nwhile not os.path.exists('/flag/replaced'): time.sleep(0.01)\nconnect('api.example.test', {port})\n"
    );
    let dir = flag.path().to_path_buf();
    let r = run_served(
        &code,
        PolicySpec {
            mode: "deny-all".into(),
            ..PolicySpec::default()
        },
        &dns,
        1024,
        Some(flag.path()),
        Some(Box::new(move |mut g| {
            wait_for(&dir.join("asked"));
            g.set_policy(&custom(&["api.example.test"], &["127.0.0.9/32"], &[]))
                .expect("replace the policy");
            std::fs::write(dir.join("replaced"), "").unwrap();
            g
        })),
    );
    assert!(r.success, "{r:?}");
    // Refused under deny-all (never resolved on the host), then served under the new policy.
    assert!(r.stdout.starts_with("api.example.test NAME "), "{r:?}");
    assert!(
        r.stdout.ends_with("api.example.test GOT echo: hi True\n"),
        "{r:?}"
    );
    assert_eq!(echo.accepted(), 1);
}

#[test]
fn the_gateway_is_confined() {
    let dns = Dns::start(&[]);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let keep = seen.clone();
    let r = run_served(
        "print('ok')",
        PolicySpec {
            mode: "allow-all".into(),
            ..PolicySpec::default()
        },
        &dns,
        1024,
        None,
        Some(Box::new(move |g| {
            let pid = g.pid().expect("a pid");
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let root: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/root"))
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            *keep.lock().unwrap() = Some((status, root));
            g
        })),
    );
    assert!(r.success, "{r:?}");
    let (status, root) = seen.lock().unwrap().take().expect("looked at the gateway");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(field("Seccomp:"), "2", "{status}");
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    assert_eq!(field("CapEff:"), "0000000000000000", "{status}");
    // Its root is an empty directory: no host file.
    assert!(root.is_empty(), "{root:?}");
    if common::is_root() {
        // Host root's gateway is not host root.
        assert_eq!(
            field("Uid:").split_whitespace().next(),
            Some(hull_cli::net::confine::GATEWAY_ID.to_string().as_str()),
            "{status}"
        );
    }
}

#[test]
fn a_box_whose_gateway_dies_has_no_network() {
    let server = Ipv4Addr::new(127, 0, 0, 10);
    let echo = Echo::start(server);
    let dns = Dns::start(&[("api.example.test", server)]);
    let port = echo.addr.port();
    let flag = tempfile::tempdir().expect("a directory");
    let code = format!(
        "{CONNECT}\nimport os, time\nconnect('api.example.test', {port})\nopen('/flag/asked', 'w').close()\nwhile not os.path.exists('/flag/killed'): time.sleep(0.01)\nsocket.setdefaulttimeout(2)\nconnect('api.example.test', {port})\n"
    );
    let dir = flag.path().to_path_buf();
    let r = run_served(
        &code,
        custom(&["api.example.test"], &["127.0.0.10/32"], &[]),
        &dns,
        1024,
        Some(flag.path()),
        Some(Box::new(move |g| {
            wait_for(&dir.join("asked"));
            let pid = g.pid().expect("a pid");
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(i32::try_from(pid).expect("a pid")).expect("a pid"),
                rustix::process::Signal::KILL,
            )
            .expect("kill the gateway");
            let t0 = Instant::now();
            while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            }) {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "the gateway lives on"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            std::fs::write(dir.join("killed"), "").unwrap();
            g
        })),
    );
    // Served before; after the gateway is gone, nothing answers (the name, or the connection).
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"api.example.test GOT echo: hi True"),
        "{r:?}"
    );
    assert_eq!(lines.len(), 2, "{r:?}");
    assert!(!lines[1].contains("GOT"), "{r:?}");
    assert_eq!(echo.accepted(), 1);
}

/// The local address (`"0100007F"` is 127.0.0.1) of the host's listening TCP socket on `port`.
fn listening_address(port: u16) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (addr, p) = f.get(1)?.split_once(':')?;
        (u16::from_str_radix(p, 16).ok()? == port && f.get(3) == Some(&"0A"))
            .then(|| addr.to_string())
    })
}

#[test]
fn published_ports_listen_on_loopback_only_reach_the_box_and_close_with_it() {
    use std::io::BufRead;
    let dns = Dns::start(&[]);
    let flag = tempfile::tempdir().expect("a directory");
    // The box serves 8000 and 8001 (on every address of its own), says so, waits to be told.
    let code = "import socket, os, time\nls = []\nfor p in (8000, 8001):\n    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', p)); s.listen(); ls.append(s)\nopen('/flag/up', 'w').close()\nfor s in ls:\n    c, peer = s.accept(); c.sendall(('box %d from %s' % (s.getsockname()[1], peer[0])).encode() + b'\\n'); c.close()\n";
    let dir = flag.path().to_path_buf();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    let r = run_published(
        code,
        PolicySpec {
            mode: "deny-all".into(),
            ..PolicySpec::default()
        },
        &dns,
        1024,
        Some(flag.path()),
        &[8000, 8001],
        Some(Box::new(move |g| {
            wait_for(&dir.join("up"));
            let mut got = keep.lock().unwrap();
            for (inner, host) in g.ports.clone() {
                let bound = listening_address(host);
                let c = std::net::TcpStream::connect(("127.0.0.1", host)).expect("connect");
                let mut line = String::new();
                std::io::BufReader::new(c).read_line(&mut line).unwrap();
                got.push((inner, host, bound, line));
            }
            g
        })),
    );
    assert!(r.success, "{r:?}");
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_ne!(got[0].1, got[1].1, "two ports, two host ports");
    for (inner, host, bound, line) in &got {
        // Only the host's loopback, never another interface.
        assert_eq!(bound.as_deref(), Some("0100007F"), "{inner} -> {host}");
        // The box saw the gateway's address as the peer.
        assert_eq!(line, &format!("box {inner} from 10.0.2.2\n"));
        // Gone with the box (its gateway ends when the box's supervisor lets go).
        let t0 = Instant::now();
        while listening_address(*host).is_some() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{host} still listens"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
