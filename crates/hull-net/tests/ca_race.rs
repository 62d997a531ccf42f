//! Processes racing to make the installation's CA end with one CA: this test binary runs
//! copies of itself (the `child` test, told the directory through the environment), all
//! released at once, and each prints the certificate it ended with.

use std::process::{Command, Stdio};

use hull_net::ca::{Ca, KEY_FILE};

const DIR_VAR: &str = "HULL_NET_TEST_CA_DIR";

/// In a child: load or make the CA and print its certificate between markers. Otherwise
/// nothing.
#[test]
fn child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let go = std::path::Path::new(&dir).with_extension("go");
    while !go.exists() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let ca = Ca::load_or_create(std::path::Path::new(&dir)).unwrap();
    println!("<<<{}>>>", ca.cert_pem());
}

#[test]
fn processes_racing_make_one_ca() {
    if std::env::var(DIR_VAR).is_ok() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("ca");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "child", "--nocapture", "--test-threads", "1"])
                .env(DIR_VAR, &dir)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::fs::write(dir.with_extension("go"), b"").unwrap();
    let pems: Vec<String> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success());
            let text = String::from_utf8(out.stdout).unwrap();
            let start = text.find("<<<").unwrap() + 3;
            let end = text.find(">>>").unwrap();
            text[start..end].to_string()
        })
        .collect();
    assert!(pems.windows(2).all(|w| w[0] == w[1]), "one CA");
    assert_eq!(Ca::load(&dir).unwrap().cert_pem(), pems[0]);
    let meta = std::fs::metadata(dir.join(KEY_FILE)).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
}
