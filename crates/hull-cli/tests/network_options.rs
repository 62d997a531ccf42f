//! The network options as every front end takes them (`hull run`'s and `hull create`'s flags,
//! `hull serve`'s `run`, `sandbox.create` and `named.create` parameters): read, refused naming
//! what the caller wrote, and, for the gateway's modes, refused where the box would be built
//! until the gateway is wired (never run with no network or the host's). No box is started by
//! a refusal, so these run root and rootless alike, and send no packet.

mod common;

use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// `hull ARGS` with `env` set: exit code, stdout, stderr.
fn hull_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(common::bin())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `hull serve` with `env`: each request's answer, in order.
fn serve(requests: &[Value], env: &[(&str, &str)]) -> Vec<Value> {
    let lines = common::serve_session(requests, env);
    requests
        .iter()
        .map(|r| {
            lines
                .iter()
                .find(|l| l["id"] == r["id"] && l.get("event").is_none())
                .cloned()
                .unwrap_or_else(|| panic!("no answer to {r}: {lines:?}"))
        })
        .collect()
}

#[test]
fn run_help_lists_the_network_flags_and_modes() {
    let (code, out, _) = hull_env(&["run", "--help"], &[]);
    assert_eq!(code, 0);
    for f in [
        "--network <MODE>",
        "deny-all",
        "allow-all",
        "custom",
        "--allow-host <HOST>",
        "--allow-cidr <CIDR>",
        "--deny-cidr <CIDR>",
        "--publish <PORT>",
        "--max-tcp-connections <N>",
        "--secret <NAME=env:VAR@HOST>",
    ] {
        assert!(out.contains(f), "`hull run --help` lacks {f}:\n{out}");
    }
    let (_, out, _) = hull_env(&["create", "--help"], &[]);
    assert!(out.contains("--allow-host <HOST>") && out.contains("--publish <PORT>"));
}

/// Python that tries the box's network without sending anything off the host: a name lookup
/// (answered by the gateway itself) and a connection to the gateway's own address (10/8: in
/// an always-denied class, so the gateway resets it without a dial).
const PROBE: &str = "import socket\ntry:\n    print('name', socket.gethostbyname('api.example.test'))\nexcept OSError as e:\n    print('name refused', e.errno)\ntry:\n    socket.create_connection(('10.0.2.2', 9), timeout=5)\n    print('connected')\nexcept ConnectionRefusedError:\n    print('connect refused')\nprint(open('/etc/resolv.conf').read().strip())";

/// A gateway mode runs the box behind its gateway: names are judged by the policy (refused
/// here, answered by the gateway without asking the host), a refused connection is reset at
/// once, the box's DNS server is the gateway, and published ports come back in the result.
#[test]
fn run_puts_a_box_behind_its_gateway_in_every_gateway_mode() {
    for args in [
        &["--network", "deny-all"][..],
        &["--network", "allow-all", "--deny-cidr", "10.0.0.0/8"],
        &["--allow-host", "*.pypi.org", "--publish", "8080"],
    ] {
        let mut full = vec!["run", "--json"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--", "/usr/bin/python3", "-c", PROBE]);
        let (code, out, err) = hull_env(&full, &[]);
        assert_eq!(code, 0, "{args:?}: {out} {err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let stdout = v["stdout"].as_str().unwrap_or_default();
        if args.contains(&"allow-all") {
            // allow-all resolves names on the host: not asked here (no traffic off the host).
        } else {
            assert!(stdout.contains("name refused"), "{args:?}: {v}");
        }
        assert!(stdout.contains("connect refused\n"), "{args:?}: {v}");
        assert!(stdout.ends_with("nameserver 10.0.2.2\n"), "{args:?}: {v}");
        let ports = v["ports"].as_array().expect("ports in the result");
        if args.contains(&"--publish") {
            assert_eq!(ports.len(), 1, "{v}");
            assert_eq!(ports[0]["port"], 8080);
            assert!(ports[0]["host_port"].as_u64().is_some_and(|p| p > 0), "{v}");
        } else {
            assert!(ports.is_empty(), "{v}");
        }
    }
    // Published ports are said on stderr without --json.
    let (code, _, err) = hull_env(
        &[
            "run",
            "--network",
            "deny-all",
            "--publish",
            "8080",
            "--",
            "true",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("the box's port 8080 is published at 127.0.0.1:"),
        "{err}"
    );
    // A secret: the box holds its placeholder, never its value (brokering itself is tested
    // end to end in brokering.rs).
    let (code, out, err) = hull_env(
        &[
            "run",
            "--allow-host",
            "api.example.test",
            "--secret",
            "HULL_NET_OPTIONS_KEY@api.example.test",
            "--",
            "sh",
            "-c",
            "echo $HULL_NET_OPTIONS_KEY",
        ],
        &[("HULL_NET_OPTIONS_KEY", "sk-options-value")],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("hull-secret-HULL_NET_OPTIONS_KEY-") && !out.contains("sk-options"),
        "{out}"
    );
    // `none` and `host` are as before.
    let v = common::run_json(&["--network", "none", "--", "true"]);
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(v.get("ports").is_none(), "{v}");
}

#[test]
fn contradictions_and_bad_entries_are_refused_naming_the_flags() {
    for (args, said) in [
        (
            &["--network", "none", "--allow-host", "x.com"][..],
            "--network none with --allow-host: ",
        ),
        (
            &["--network", "host", "--publish", "80"],
            "--network host with --publish: ",
        ),
        (
            &["--network", "deny-all", "--allow-host", "x.com"],
            "--network deny-all with --allow-host: deny-all allows nothing",
        ),
        (
            &["--allow-host", "a..b"],
            "--allow-host: allowed host `a..b`",
        ),
        (
            &["--network", "custom", "--allow-cidr", "10.0.0.0/33"],
            "--allow-cidr: CIDR `10.0.0.0/33`",
        ),
        (
            &["--network", "deny-all", "--publish", "70000"],
            "--publish: 70000",
        ),
        (
            &[
                "--network",
                "custom",
                "--secret",
                "K=sk-123@api.example.com",
            ],
            "--secret: `K=...`: a value on the command line",
        ),
    ] {
        let mut full = vec!["run"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--", "true"]);
        let (code, _, err) = hull_env(&full, &[]);
        assert_eq!(code, 125, "{args:?}");
        assert!(err.contains(said), "{args:?}: {err}");
        assert!(!err.contains("sk-123"), "{err}");
    }
    let (code, _, err) = hull_env(&["run", "--network", "maybe", "--", "true"], &[]);
    assert_eq!(code, 125);
    assert!(
        err.contains("--network <MODE>") && err.contains("deny-all"),
        "{err}"
    );
}

#[test]
fn create_makes_a_sandbox_behind_its_gateway_with_secrets_read_by_each_starter() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("HULL_SANDBOXES", dir.path().to_str().unwrap()),
        ("HULL_NET_API_TEST_KEY", "sk-never-on-disk"),
    ];
    // Secrets: the box holds a placeholder; the value is on no disk (config.json keeps the
    // reference), and a process starting the sandbox without the variable is refused.
    let (code, _, err) = hull_env(
        &[
            "create",
            "sec",
            "--network",
            "custom",
            "--allow-host",
            "api.example.test",
            "--secret",
            "KEY=env:HULL_NET_API_TEST_KEY@api.example.test",
        ],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = hull_env(&["exec", "sec", "--", "sh", "-c", "echo $KEY"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("hull-secret-KEY-"), "{out}");
    let mut on_disk = Vec::new();
    for e in walk(&dir.path().join("sec")) {
        if std::fs::read(&e).is_ok_and(|b| b.windows(16).any(|w| w == b"sk-never-on-disk")) {
            on_disk.push(e);
        }
    }
    assert!(on_disk.is_empty(), "the value is on disk: {on_disk:?}");
    let (code, _, err) = hull_env(&["stop", "sec"], &env);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = hull_env(
        &["exec", "sec", "--", "true"],
        &[("HULL_SANDBOXES", dir.path().to_str().unwrap())],
    );
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("no variable HULL_NET_API_TEST_KEY")
            && err.contains("the process that starts it"),
        "{err}"
    );
    let (code, _, err) = hull_env(&["rm", "sec"], &env);
    assert_eq!(code, 0, "{err}");
    // Without: the sandbox runs behind its gateway, which logs what it decided.
    let (code, _, err) = hull_env(
        &[
            "create",
            "netbox",
            "--network",
            "custom",
            "--allow-host",
            "api.example.test",
            "--publish",
            "8080",
        ],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = hull_env(
        &["exec", "netbox", "--", "/usr/bin/python3", "-c", PROBE],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("connect refused\n"), "{out}");
    assert!(out.ends_with("nameserver 10.0.2.2\n"), "{out}");
    let log = std::fs::read_to_string(dir.path().join("netbox/net.log")).unwrap_or_default();
    assert!(log.contains("\"kind\":\"flow\""), "{log}");
    let ports: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("netbox/ports.json")).expect("ports.json"),
    )
    .unwrap();
    assert_eq!(ports[0]["port"], 8080, "{ports}");
    let (code, _, err) = hull_env(&["rm", "netbox"], &env);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = hull_env(
        &["create", "netbox", "--network", "none", "--publish", "80"],
        &env,
    );
    assert_eq!(code, 125);
    assert!(err.contains("--network none with --publish"), "{err}");
    let (code, _, err) = hull_env(
        &[
            "create",
            "netbox",
            "--network",
            "custom",
            "--secret",
            "K=env:HULL_NO_SUCH_VAR_9@a.com",
        ],
        &env,
    );
    assert_eq!(code, 125);
    assert!(err.contains("no variable HULL_NO_SUCH_VAR_9"), "{err}");
}

#[test]
fn serve_takes_network_as_a_string_or_an_object_and_names_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("HULL_SANDBOXES", dir.path().to_str().unwrap())];
    let a = serve(
        &[
            json!({"id": 1, "method": "run", "params": {"argv": ["true"], "network": "deny-all"}}),
            json!({"id": 2, "method": "run", "params": {"argv": ["true"], "network": {"mode": "custom", "allow_hosts": ["*.example.com"], "ports": [8080], "max_tcp_connections": 8}}}),
            json!({"id": 3, "method": "run", "params": {"argv": ["true"], "network": {"allow_hosts": ["a..b"]}}}),
            json!({"id": 4, "method": "run", "params": {"argv": ["true"], "network": {"mode": "none", "ports": [80]}}}),
            json!({"id": 5, "method": "run", "params": {"argv": ["true"], "network": "host", "secrets": [{"name": "K", "value": "sk-zzz", "hosts": ["a.com"]}]}}),
            json!({"id": 6, "method": "sandbox.create", "params": {"network": "allow-all"}}),
            json!({"id": 7, "method": "sandbox.create", "params": {"network": {"mode": "custom", "deny_cidrs": ["x"]}}}),
            json!({"id": 8, "method": "named.create", "params": {"name": "n1", "network": {"mode": "custom", "allow_hosts": ["api.example.com"]}, "secrets": [{"name": "K", "env": "HOME", "hosts": ["api.example.com"]}]}}),
            json!({"id": 9, "method": "named.create", "params": {"name": "n2", "network": "custom", "secrets": [{"name": "K", "value": "sk-zzz", "hosts": ["api.example.com"]}]}}),
            json!({"id": 10, "method": "run", "params": {"argv": ["true"], "network": "none"}}),
        ],
        &env,
    );
    let e = |i: usize| &a[i]["error"];
    // `run` puts its box behind a gateway, and so does a Sandbox session.
    for i in [0, 1] {
        assert_eq!(a[i]["result"]["exit_code"], 0, "{}", a[i]);
    }
    assert_eq!(a[1]["result"]["ports"][0]["port"], 8080, "{}", a[1]);
    assert!(a[5]["result"]["sandbox"].is_string(), "{}", a[5]);
    assert_eq!(
        (&e(2)["kind"], &e(2)["arg"]),
        (&json!("invalid_argument"), &json!("network"))
    );
    assert!(
        e(2)["message"]
            .as_str()
            .unwrap()
            .contains("allow_hosts: allowed host `a..b`"),
        "{}",
        a[2]
    );
    assert!(
        e(3)["message"]
            .as_str()
            .unwrap()
            .contains("mode none with ports"),
        "{}",
        a[3]
    );
    assert_eq!(e(4)["arg"], "secrets", "{}", a[4]);
    assert!(e(4)["message"]
        .as_str()
        .unwrap()
        .contains("network host with secrets"));
    assert_eq!(e(6)["arg"], "network", "{}", a[6]);
    assert!(e(6)["message"]
        .as_str()
        .unwrap()
        .contains("deny_cidrs: CIDR `x`"));
    assert_eq!(a[7]["result"]["created"], true, "{}", a[7]);
    let _ = hull_env(&["rm", "n1"], &env);
    assert_eq!(e(8)["arg"], "secrets", "{}", a[8]);
    assert!(e(8)["message"].as_str().unwrap().contains("give `env`"));
    assert_eq!(a[9]["result"]["exit_code"], 0, "{}", a[9]);
    // No answer echoes a secret's value.
    for v in &a {
        assert!(!v.to_string().contains("sk-zzz"), "{v}");
    }
}

/// A named sandbox's policy replaced while it runs: its next connection is judged by the new
/// one, and a later start keeps it. Loopback only (a DNS and an echo server of the test's).
#[test]
fn a_named_sandboxs_policy_is_replaced_while_it_runs_and_kept() {
    use std::net::Ipv4Addr;
    let server = Ipv4Addr::new(127, 0, 0, 13);
    let echo = common::net::Echo::start(server);
    let dns = common::net::Dns::start(&[("api.example.test", server)]);
    let dir = tempfile::tempdir().unwrap();
    let dns_addr = dns.addr.to_string();
    let env = [
        ("HULL_SANDBOXES", dir.path().to_str().unwrap()),
        ("HULL_NET_DNS", dns_addr.as_str()),
    ];
    let (code, _, err) = hull_env(
        &[
            "create",
            "live",
            "--allow-host",
            "api.example.test",
            "--allow-cidr",
            "127.0.0.13/32",
        ],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let connect = format!(
        "import socket\ntry:\n    s = socket.create_connection(('api.example.test', {}), timeout=10)\n    s.sendall(b'hi\\n'); print(s.makefile().readline().strip())\nexcept OSError as e:\n    print('refused', type(e).__name__)",
        echo.addr.port()
    );
    let exec = || {
        let (code, out, err) = hull_env(
            &["exec", "live", "--", "/usr/bin/python3", "-c", &connect],
            &env,
        );
        assert_eq!(code, 0, "{err}");
        out
    };
    assert_eq!(exec(), "echo: hi\n");
    let a = serve(
        &[
            json!({"id": 1, "method": "named.set_network", "params": {"sandbox": "live", "network": "deny-all"}}),
            json!({"id": 2, "method": "named.set_network", "params": {"sandbox": "live", "network": "host"}}),
            json!({"id": 3, "method": "named.set_network", "params": {"sandbox": "live", "network": {"mode": "custom", "ports": [80]}}}),
        ],
        &env,
    );
    assert_eq!(a[0]["result"]["running"], true, "{}", a[0]);
    assert_eq!(a[1]["error"]["arg"], "network", "{}", a[1]);
    assert_eq!(a[2]["error"]["arg"], "network", "{}", a[2]);
    assert_eq!(exec(), "refused gaierror\n");
    // Kept across a stop and a start.
    let (code, _, err) = hull_env(&["stop", "live"], &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(exec(), "refused gaierror\n");
    assert_eq!(echo.accepted(), 1);
    // A sandbox without the gateway network has no policy to replace.
    let (code, _, err) = hull_env(&["create", "plain"], &env);
    assert_eq!(code, 0, "{err}");
    let a = serve(
        &[
            json!({"id": 1, "method": "named.set_network", "params": {"sandbox": "plain", "network": "deny-all"}}),
        ],
        &env,
    );
    assert!(
        a[0]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("was created without the gateway network"),
        "{}",
        a[0]
    );
    for n in ["live", "plain"] {
        let _ = hull_env(&["rm", n], &env);
    }
}

/// Every file below `dir` (not following links).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out
}

/// A loopback CONNECT proxy that plays the upstream itself (it answers each tunnel's first line
/// with `tunnelled: LINE`, dialling nothing) and records each request head.
fn fake_proxy() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use std::io::{BufRead, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = heads.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut r = std::io::BufReader::new(c.try_clone().unwrap());
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                seen.lock().unwrap().push(head);
                let mut w = c;
                let _ = w.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let mut line = String::new();
                if r.read_line(&mut line).is_ok() {
                    let _ = write!(w, "tunnelled: {line}");
                }
            });
        }
    });
    (addr, heads)
}

/// With `HTTPS_PROXY` set, the gateway reaches an allowed upstream through a `CONNECT` tunnel to
/// the address it judged, with the proxy URL's credentials; the box sees only the upstream.
/// Nothing leaves the host: the upstream is a documentation address (allowed by a CIDR) that
/// only the loopback proxy "reaches".
#[test]
fn the_gateway_tunnels_through_the_hosts_proxy() {
    let upstream = std::net::Ipv4Addr::new(198, 51, 100, 7);
    let dns = common::net::Dns::start(&[("api.example.test", upstream)]);
    let (proxy, heads) = fake_proxy();
    let dns_addr = dns.addr.to_string();
    let proxy_url = format!("http://me:p%40ss@{proxy}");
    let code = "import socket\ns = socket.create_connection(('api.example.test', 8443), timeout=10)\ns.sendall(b'hi\\n'); print(s.makefile().readline().strip())";
    let (exit, out, err) = hull_env(
        &[
            "run",
            "--allow-host",
            "api.example.test",
            "--allow-cidr",
            "198.51.100.7/32",
            "--",
            "python3",
            "-c",
            code,
        ],
        &[
            ("HULL_NET_DNS", dns_addr.as_str()),
            ("HTTPS_PROXY", proxy_url.as_str()),
        ],
    );
    assert_eq!((exit, out.as_str()), (0, "tunnelled: hi\n"), "{err}");
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].starts_with("CONNECT 198.51.100.7:8443 HTTP/1.1\r\n"),
        "{heads:?}"
    );
    assert!(
        heads[0].contains("Proxy-Authorization: Basic bWU6cEBzcw==\r\n"),
        "{heads:?}"
    );
    // A proxy hull cannot speak is refused before any box starts, naming the variable.
    let (exit, _, err) = hull_env(
        &["run", "--network", "deny-all", "--", "true"],
        &[("HTTPS_PROXY", "socks5://127.0.0.1:1080")],
    );
    assert_eq!(exit, 125, "{err}");
    assert!(err.contains("HTTPS_PROXY: `socks5://`"), "{err}");
}
