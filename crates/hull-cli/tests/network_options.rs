//! The network options as every front end takes them (`hull run`'s and `hull create`'s flags,
//! `hull serve`'s `run`, `sandbox.create` and `named.create` parameters): read, refused naming
//! what the caller wrote, and, for the gateway's modes, refused where the box would be built
//! until the gateway is wired (never run with no network or the host's). No box is started by
//! a refusal, so these run root and rootless alike, and send no packet.

mod common;

use std::io::{BufRead, BufReader, Write};
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
    let mut child = Command::new(common::bin())
        .arg("serve")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for r in requests {
            writeln!(stdin, "{r}").unwrap();
        }
        writeln!(stdin, "{}", json!({"id": "end", "method": "shutdown"})).unwrap();
    }
    let lines: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(child.wait().unwrap().success());
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

/// A gateway mode is accepted by the parser and refused at build, naming the mode, with exit
/// 125 and no output of a program: the box did not run without its policy.
#[test]
fn run_refuses_a_gateway_mode_at_build_naming_it() {
    for (args, mode) in [
        (&["--network", "deny-all"][..], "deny-all"),
        (
            &["--network", "allow-all", "--deny-cidr", "10.0.0.0/8"],
            "allow-all",
        ),
        (
            &["--allow-host", "*.pypi.org", "--publish", "8080"],
            "custom",
        ),
    ] {
        let mut full = vec!["run", "--json"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--", "sh", "-c", "echo RAN"]);
        let (code, out, _) = hull_env(&full, &[]);
        assert_eq!(code, 125, "{args:?}: {out}");
        assert!(!out.contains("RAN"));
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["error"]["kind"], "network_unavailable", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with(&format!(
                "--network: network mode `{mode}` needs the hull-net gateway"
            )),
            "{msg}"
        );
        // And on stderr without --json.
        let (code, _, err) = hull_env(
            &full[0..1]
                .iter()
                .chain(&full[2..])
                .copied()
                .collect::<Vec<_>>(),
            &[],
        );
        assert_eq!(code, 125);
        assert!(err.contains("needs the hull-net gateway"), "{err}");
    }
    // `none` and `host` are as before.
    let v = common::run_json(&["--network", "none", "--", "true"]);
    assert_eq!(v["exit_code"], 0, "{v}");
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
    assert_eq!(code, 2);
    assert!(
        err.contains("--network <MODE>") && err.contains("deny-all"),
        "{err}"
    );
}

#[test]
fn create_refuses_a_gateway_mode_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("HULL_SANDBOXES", dir.path().to_str().unwrap()),
        ("HULL_NET_API_TEST_KEY", "sk-never-on-disk"),
    ];
    let (code, _, err) = hull_env(
        &[
            "create",
            "netbox",
            "--network",
            "custom",
            "--allow-host",
            "api.example.com",
            "--secret",
            "KEY=env:HULL_NET_API_TEST_KEY@api.example.com",
        ],
        &env,
    );
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("network mode `custom` needs the hull-net gateway"),
        "{err}"
    );
    assert!(
        !dir.path().join("netbox").exists(),
        "a refused sandbox was left"
    );
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
    for (i, mode) in [(0, "deny-all"), (1, "custom"), (5, "allow-all")] {
        assert_eq!(e(i)["kind"], "network_unavailable", "{}", a[i]);
        assert_eq!(
            (&e(i)["arg"], &e(i)["mode"]),
            (&json!("network"), &json!(mode))
        );
        assert!(e(i)["message"]
            .as_str()
            .unwrap()
            .contains(&format!("network mode `{mode}` needs the hull-net gateway")));
    }
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
    assert_eq!(
        (&e(7)["kind"], &e(7)["mode"]),
        (&json!("network_unavailable"), &json!("custom")),
        "{}",
        a[7]
    );
    assert!(
        e(7)["message"]
            .as_str()
            .unwrap()
            .contains("network mode `custom` needs the hull-net gateway"),
        "{}",
        a[7]
    );
    assert!(
        !dir.path().join("n1").exists(),
        "a refused sandbox was left"
    );
    assert_eq!(e(8)["arg"], "secrets", "{}", a[8]);
    assert!(e(8)["message"].as_str().unwrap().contains("give `env`"));
    assert_eq!(a[9]["result"]["exit_code"], 0, "{}", a[9]);
    // No answer echoes a secret's value.
    for v in &a {
        assert!(!v.to_string().contains("sk-zzz"), "{v}");
    }
}
