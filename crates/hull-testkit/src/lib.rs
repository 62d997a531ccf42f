//! What hull's tests share across crates: a skip that shows.
//!
//! A test that cannot run here (a kernel feature, a tool or a privilege is missing) calls
//! [`skip`] and returns; one that runs only in part calls [`skip_part`] for the part it leaves
//! out. libtest has no "skipped" state, so such a test still counts as passed. What keeps the
//! skip from passing silently:
//!
//! - a `SKIP: <binary>::<test>: <reason>` line written straight to stderr, which libtest's
//!   output capture does not hold back, so it shows in every run;
//! - a record appended to the file named by `HULL_SKIP_LOG`, when set: `scripts/test.sh` sets
//!   it, lists every skip in its summary and fails on any that `scripts/expected-skips` does not
//!   expect on CI's machines.

use std::fmt::Display;
use std::io::Write;

/// The whole test did not run here; `reason` says why (and, where it helps, the fix).
pub fn skip(reason: impl Display) {
    record(&test_id(), &reason.to_string());
}

/// `part` of the test did not run here (the rest did); `reason` says why.
pub fn skip_part(part: &str, reason: impl Display) {
    record(&format!("{}#{part}", test_id()), &reason.to_string());
}

/// Who ran the tests, as the expected-skips list names it: `root` or `rootless`.
pub fn runner() -> &'static str {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        "root"
    } else {
        "rootless"
    }
}

fn record(id: &str, reason: &str) {
    let reason = reason.replace(['\t', '\n'], " ");
    // Straight to the stream: libtest captures `eprintln!`, not writes to stderr itself.
    let _ = writeln!(std::io::stderr(), "SKIP: {id}: {reason}");
    if let Some(path) = std::env::var_os("HULL_SKIP_LOG") {
        // One write of one line to a file opened for appending: records of tests running at
        // once (threads, or the root and rootless passes) do not interleave.
        let line = format!("{}\t{id}\t{reason}\n", runner());
        let written = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!("cannot record the skip in HULL_SKIP_LOG {path:?}: {e}");
        }
    }
}

/// `<binary>::<test>`: the test binary's name without cargo's hash suffix, and libtest's name
/// for the running test (it names each test's thread after the test).
fn test_id() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe
        .as_deref()
        .and_then(|p| p.file_stem())
        .map_or_else(|| "?".to_string(), |s| s.to_string_lossy().into_owned());
    let binary = match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => stem,
    };
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}

/// A root filesystem of this host's static busybox (Debian's `busybox-static`) in `dir/root`,
/// with `applets` linked in `/bin`: the image of the tests that need one of their own (the
/// microVM tier runs an image, never `host`). `Err` is the skip's reason.
pub fn busybox_root(dir: &std::path::Path, applets: &[&str]) -> Result<std::path::PathBuf, String> {
    let bb = std::path::Path::new("/bin/busybox");
    if !bb.is_file() {
        return Err("no /bin/busybox for the test image (apt-get install busybox-static)".into());
    }
    let root = dir.join("root");
    let made = std::fs::create_dir_all(root.join("bin"))
        .and_then(|()| std::fs::copy(bb, root.join("bin/busybox")).map(drop))
        .and_then(|()| {
            applets
                .iter()
                .try_for_each(|a| std::os::unix::fs::symlink("busybox", root.join("bin").join(a)))
        });
    made.map_err(|e| format!("cannot make the busybox root in {}: {e}", dir.display()))?;
    Ok(root)
}

/// Copies the host's `program` (found on `PATH`) into `root` at the same path, with every
/// shared library `ldd` names for it (and the dynamic loader), so a busybox root can run a
/// dynamically linked tool of the host's (curl, for TLS through a VM's gateway). `Err` is the
/// skip's reason.
pub fn add_host_program(root: &std::path::Path, program: &str) -> Result<(), String> {
    let which = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map_err(|e| format!("cannot look for {program}: {e}"))?;
    let path = String::from_utf8_lossy(&which.stdout).trim().to_string();
    if path.is_empty() {
        return Err(format!(
            "{program} is not installed (scripts/setup.sh installs it)"
        ));
    }
    let ldd = std::process::Command::new("ldd")
        .arg(&path)
        .output()
        .map_err(|e| format!("cannot run ldd on {path}: {e}"))?;
    let mut files = vec![path.clone()];
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // `libx.so.1 => /lib/.../libx.so.1 (0x...)` or `/lib64/ld-linux-x86-64.so.2 (0x...)`.
        let lib = line.split_once("=>").map_or(line, |(_, l)| l).trim();
        if let Some(p) = lib.split_whitespace().next().filter(|p| p.starts_with('/')) {
            files.push(p.to_string());
        }
    }
    for f in files {
        let to = root.join(f.trim_start_matches('/'));
        let copied = to
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::copy(&f, &to).map(drop));
        copied.map_err(|e| format!("cannot copy {f} into {}: {e}", root.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_skip_is_recorded_with_its_test_and_runner() {
        let dir = std::env::temp_dir().join(format!("hull-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips.tsv");
        std::env::set_var("HULL_SKIP_LOG", &log);
        super::skip("no\tsuch\nfeature");
        super::skip_part("half", "root only");
        std::env::remove_var("HULL_SKIP_LOG");
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let who = super::runner();
        let id = "hull_testkit::tests::a_skip_is_recorded_with_its_test_and_runner";
        assert_eq!(
            text,
            format!("{who}\t{id}\tno such feature\n{who}\t{id}#half\troot only\n")
        );
    }
}
