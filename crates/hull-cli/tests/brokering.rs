//! Credential brokering through `hull run`, end to end and on loopback only: an HTTPS server
//! on 127.0.0.12 (its own test CA, given to the gateway's upstream trust) stands for an API,
//! a loopback DNS server maps its names there, and the box holds a placeholder where the real
//! value would be. Root and unprivileged.

mod common;

use std::process::{Command, Stdio};

use common::tls::Fixture;

const REAL: &str = "sk-REAL-0123456789abcdef";

#[test]
fn a_brokered_secret_reaches_its_host_and_never_the_box() {
    if Command::new("curl").arg("--version").output().is_err() {
        hull_testkit::skip("curl is not installed (scripts/setup.sh installs it)");
        return;
    }
    // The box's user (host root's box: the range's root) reads the test CA through --mount.
    let f = Fixture::with_names(&["api.example.test", "other.example.test"]);
    let (dir, home) = (&f.dir, &f.home);
    let port = f.srv.port;
    // The box: the placeholder is all it has; curl trusts the gateway's CA through the
    // environment hull sets; another allowed host (no secret) is reached untouched, checked
    // with the test CA itself.
    let script = format!(
        "echo \"env $KEY\"\n\
         curl -sS https://api.example.test:{port}/a -H \"Authorization: Bearer $KEY\"; echo\n\
         curl -sS --cacert /ca/test-ca.pem https://other.example.test:{port}/b -H \"Authorization: Bearer $KEY\"; echo\n\
         if cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -q {REAL}; then echo LEAKED; else echo clean; fi\n\
         unset SSL_CERT_FILE CURL_CA_BUNDLE REQUESTS_CA_BUNDLE\n\
         curl -sS https://api.example.test:{port}/c -H \"Authorization: Bearer $KEY\"; echo\n\
         python3 -c 'import urllib.request; print(urllib.request.urlopen(\"https://api.example.test:{port}/d\").read().decode())'\n"
    );
    let out = Command::new(common::bin())
        .args([
            "run",
            "--allow-host",
            "api.example.test",
            "--allow-host",
            "other.example.test",
            "--allow-cidr",
            "127.0.0.12/32",
            "--secret",
            "KEY=env:HULL_TEST_REAL_KEY@api.example.test",
            "--mount",
        ])
        .arg(format!("{}:/ca:ro", dir.path().display()))
        .args(["--", "sh", "-c", &script])
        .env("HULL_TEST_REAL_KEY", REAL)
        .envs(f.env())
        .stdin(Stdio::null())
        .output()
        .expect("run hull");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}\n{stderr}");
    let placeholder = lines[0].strip_prefix("env ").unwrap_or_default();
    assert!(placeholder.starts_with("hull-secret-KEY-"), "{stdout}");
    assert!(
        !stdout.contains(REAL),
        "the real value reached the box: {stdout}"
    );
    // The API echoed what it got: the box reads the placeholder back (scrubbed).
    assert_eq!(
        lines[1],
        format!("auth=Bearer {placeholder}"),
        "{stdout}\n{stderr}"
    );
    // The host without the secret got the placeholder as the box sent it.
    assert_eq!(
        lines[2],
        format!("auth=Bearer {placeholder}"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(lines[3], "clean");
    // With the variables cleared, curl and Python read the system bundle, which hull covered
    // with a copy holding the gateway CA.
    assert_eq!(
        lines[4],
        format!("auth=Bearer {placeholder}"),
        "{stdout}\n{stderr}"
    );
    assert!(lines[5].starts_with("auth="), "{stdout}\n{stderr}");
    // Upstream: the real value for the secret's host, the placeholder for the other.
    let seen = std::fs::read_to_string(dir.path().join("seen.log")).unwrap_or_default();
    assert!(
        seen.lines()
            .any(|l| l.starts_with("api.example.test") && l.ends_with(&format!("Bearer {REAL}"))),
        "{seen}"
    );
    assert!(
        seen.lines().any(|l| l.starts_with("other.example.test")
            && l.ends_with(&format!("Bearer {placeholder}"))),
        "{seen}"
    );
    // The CA was made for the installation, its key private.
    let key = home.path().join("ca/ca.key");
    let mode = std::fs::metadata(&key)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.ok(), Some(0o600), "{}", key.display());
}

/// `hull ca rotate` replaces the installation's CA whole: boxes started after it trust the new
/// one only (in the trust directory and in the system bundle), the key stays private, and
/// nothing is left beside it. No packet is sent: the box only reads its trust.
#[test]
fn a_rotated_ca_is_what_later_boxes_trust() {
    let home = tempfile::tempdir().unwrap();
    let hull = |args: &[&str]| {
        let out = Command::new(common::bin())
            .args(args)
            .env("HULL_HOME", home.path())
            .env("HULL_TEST_KEY", "sk-rotate")
            .stdin(Stdio::null())
            .output()
            .expect("run hull");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let path = hull(&["ca", "path"]);
    let cert = std::path::PathBuf::from(path.trim());
    let before = std::fs::read_to_string(&cert).unwrap();
    assert_eq!(hull(&["ca", "rotate"]), path);
    let after = std::fs::read_to_string(&cert).unwrap();
    assert_ne!(before, after);
    let key = cert.with_file_name("ca.key");
    let mode = std::fs::metadata(&key)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.ok(), Some(0o600));
    let names: Vec<String> = std::fs::read_dir(home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".ca"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
    let seen = hull(&[
        "run",
        "--allow-host",
        "api.example.test",
        "--secret",
        "K=env:HULL_TEST_KEY@api.example.test",
        "--",
        "sh",
        "-c",
        "cat /.hull-ca/ca.pem; echo @@END-OF-CA@@; tail -c 4000 /etc/ssl/certs/ca-certificates.crt",
    ]);
    let (trusted, bundle_tail) = seen.split_once("@@END-OF-CA@@\n").unwrap();
    assert_eq!(trusted, after);
    assert!(bundle_tail.ends_with(&after), "{bundle_tail}");
    assert!(!seen.contains(before.trim()), "the old CA is still trusted");
}

/// A Sandbox session made before `hull ca rotate` keeps brokering after it: every box of the
/// session trusts the CA the session was made with, and its gateways sign with that one (they
/// got the CA's files opened once, not reopened by path after the rotation).
#[test]
fn a_session_made_before_a_rotation_keeps_brokering_after_it() {
    let f = Fixture::new();
    let env = f.env();
    let curl = format!(
        "curl -sS https://api.example.test:{}/s -H \"Authorization: Bearer $KEY\"",
        f.srv.port
    );
    let mut serve = common::Serve::start(&env);
    let made = serve.ask("sandbox.create", serde_json::json!({
        "network": {"mode": "custom", "allow_hosts": ["api.example.test"], "allow_cidrs": ["127.0.0.12/32"]},
        "secrets": [{"name": "KEY", "value": REAL, "hosts": ["api.example.test"]}]}));
    let sid = made["result"]["sandbox"].clone();
    assert!(sid.is_string(), "{made}");
    let mut run = || {
        let a = serve.ask(
            "sandbox.run",
            serde_json::json!({"sandbox": sid, "argv": ["sh", "-c", curl]}),
        );
        a["result"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(run().starts_with("auth=Bearer hull-secret-KEY-"));
    let rotated = Command::new(common::bin())
        .args(["ca", "rotate"])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(rotated.status.success(), "{rotated:?}");
    let after = run();
    assert!(after.starts_with("auth=Bearer hull-secret-KEY-"), "{after}");
}

/// A named sandbox made with `brokering` and no secret: request transformations set while it
/// runs (`named.set_transformations`) put a literal value in the requests they match, upstream
/// only; a later set replaces them, an empty one removes them, and none is written to disk.
#[test]
fn transformations_set_on_a_running_named_sandbox_reach_upstream_and_are_replaced() {
    if Command::new("curl").arg("--version").output().is_err() {
        hull_testkit::skip("curl is not installed (scripts/setup.sh installs it)");
        return;
    }
    let f = Fixture::new();
    let (dir, srv) = (&f.dir, &f.srv);
    let boxes = tempfile::tempdir().unwrap();
    let mut env = f.env();
    env.push(("HULL_SANDBOXES", boxes.path().to_str().unwrap()));
    let mut serve = common::Serve::start(&env);
    let mut ask = |method: &str, params: serde_json::Value| serve.ask(method, params);
    let net = serde_json::json!({"mode": "custom", "allow_hosts": ["api.example.test"], "allow_cidrs": ["127.0.0.12/32"]});
    // Brokering needs the gateway network.
    let a = ask(
        "named.create",
        serde_json::json!({"name": "nobroker", "brokering": true}),
    );
    assert_eq!(a["error"]["arg"], "brokering", "{a}");
    let a = ask(
        "named.create",
        serde_json::json!({"name": "tx", "network": net, "brokering": true}),
    );
    assert!(a.get("error").is_none(), "{a}");
    let curl = |key: &str, path: &str| {
        format!(
            "curl -sS -o /dev/null -w '%{{http_code}}' https://api.example.test:{}/{path} -H 'Authorization: Bearer {key}'",
            srv.port
        )
    };
    let exec = |ask: &mut dyn FnMut(&str, serde_json::Value) -> serde_json::Value, cmd: String| {
        let a = ask(
            "named.exec",
            serde_json::json!({"sandbox": "tx", "shell": cmd}),
        );
        a["result"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let seen = || std::fs::read_to_string(dir.path().join("seen.log")).unwrap_or_default();
    let last_seen = || seen().lines().last().unwrap_or_default().to_string();
    let set = |ask: &mut dyn FnMut(&str, serde_json::Value) -> serde_json::Value,
               params: serde_json::Value| {
        let a = ask("named.set_transformations", params);
        assert_eq!(a["result"]["set"], true, "{a}");
    };
    // Before any transformation the box trusts the gateway's CA (brokering is on), and a request
    // is spliced untouched: curl, trusting only the gateway CA, cannot verify the real host.
    let rule = |value: &str| {
        serde_json::json!([{
            "match": {"hosts": ["api.example.test"], "headers": {"authorization": "Bearer aisdkhc_box"}},
            "headers": {"authorization": format!("Bearer {value}")}
        }])
    };
    set(
        &mut ask,
        serde_json::json!({"sandbox": "tx", "transformations": rule(REAL)}),
    );
    assert_eq!(exec(&mut ask, curl("aisdkhc_box", "one")), "200");
    assert_eq!(exec(&mut ask, curl("something-else", "two")), "200");
    let log = seen();
    assert!(
        log.lines()
            .any(|l| l.starts_with("api.example.test") && l.ends_with(&format!("Bearer {REAL}"))),
        "the matching request did not get the value: {log}"
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with("api.example.test") && l.ends_with("Bearer something-else")),
        "a request the rule does not match was changed: {log}"
    );
    // Replaced, then removed.
    set(
        &mut ask,
        serde_json::json!({"sandbox": "tx", "transformations": rule("second-value")}),
    );
    assert_eq!(exec(&mut ask, curl("aisdkhc_box", "three")), "200");
    assert!(last_seen().ends_with("Bearer second-value"), "{}", seen());
    // `add` merges: a rule for another placeholder joins, the same match and header replaces.
    let other = serde_json::json!([{
        "match": {"hosts": ["api.example.test"], "headers": {"authorization": "Bearer aisdkhc_two"}},
        "headers": {"authorization": "Bearer two-value"}
    }]);
    set(
        &mut ask,
        serde_json::json!({"sandbox": "tx", "add": true, "transformations": other}),
    );
    set(
        &mut ask,
        serde_json::json!({"sandbox": "tx", "add": true, "transformations": rule("third-value")}),
    );
    assert_eq!(exec(&mut ask, curl("aisdkhc_two", "two")), "200");
    assert!(last_seen().ends_with("Bearer two-value"), "{}", seen());
    assert_eq!(exec(&mut ask, curl("aisdkhc_box", "three")), "200");
    assert!(last_seen().ends_with("Bearer third-value"), "{}", seen());
    set(
        &mut ask,
        serde_json::json!({"sandbox": "tx", "transformations": []}),
    );
    // Spliced again: the box's curl trusts the gateway CA only, so the real host's chain fails.
    assert_ne!(exec(&mut ask, curl("aisdkhc_box", "four")), "200");
    // A bad transformation is refused naming the argument, without quoting its value.
    let a = ask(
        "named.set_transformations",
        serde_json::json!({"sandbox": "tx", "transformations": [{"match": {"hosts": ["api.example.test"]}, "headers": {"x-api-key": "sk-LEAK\nME"}}]}),
    );
    assert_eq!(a["error"]["arg"], "transformations", "{a}");
    assert!(!a.to_string().contains("LEAK"), "{a}");
    // Nothing of them on disk.
    let on_disk = std::process::Command::new("grep")
        .args(["-r", "-l", REAL])
        .arg(boxes.path())
        .output()
        .unwrap();
    assert!(on_disk.stdout.is_empty(), "{:?}", on_disk);
    // A stopped sandbox has no gateway to take them.
    ask("named.stop", serde_json::json!({"sandbox": "tx"}));
    let a = ask(
        "named.set_transformations",
        serde_json::json!({"sandbox": "tx", "transformations": rule(REAL)}),
    );
    assert_eq!(a["error"]["arg"], "sandbox", "{a}");
    ask("named.rm", serde_json::json!({"sandbox": "tx"}));
}
