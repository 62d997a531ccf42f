//! `hull run -t`/`-it` through a real terminal: tmux runs hull in a pane, keys are sent to it and
//! the pane is read back, as a user at a terminal would see it.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of this test's own (its own socket name), killed on drop.
struct Tmux(String);

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.0)
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }

    fn pane(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// Waits until the pane shows `what` (after `after` earlier showings), up to 20 s.
    fn wait_for(&self, what: &str, count: usize) -> String {
        let t0 = Instant::now();
        loop {
            let p = self.pane();
            if p.matches(what).count() >= count {
                return p;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "never saw {what:?} x{count}:\n{p}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// bash in the box on a terminal of its own: stdin and stdout are a terminal of the pane's
/// size; Ctrl-C interrupts the program, not the box; a resize reaches the box; `stty -echo` in
/// the box leaves the caller's terminal as it was, and the exit code comes back.
#[test]
fn run_it_gives_the_box_a_terminal_of_its_own() {
    if Command::new("tmux").arg("-V").output().is_err() {
        hull_testkit::skip("tmux is not installed (scripts/setup.sh installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let at = |f: &str| dir.path().join(f).display().to_string();
    let script = format!(
        "stty -g > {before}; {hull} run -it -- bash --norc --noprofile; echo EXIT=$?; stty -g > {after}; echo DONE; sleep 60",
        before = at("before"),
        after = at("after"),
        hull = common::bin().display()
    );
    let t = Tmux(format!("hull-test-{}", std::process::id()));
    let made = t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "30",
        "sh",
        "-c",
        &script,
    ]);
    assert!(made.status.success(), "{made:?}");
    t.wait_for("#", 1);
    t.keys(&[
        "test -t 0 && test -t 1 && echo TERMINAL-$((40+2)); stty size",
        "Enter",
    ]);
    // `stty size` prints after the echo: wait for its line, not only the first.
    let p = t.wait_for("30 100", 1);
    assert!(p.contains("TERMINAL-42"), "{p}");
    // Ctrl-C ends the program in the foreground, bash (and the box) carry on.
    t.keys(&["sleep 100", "Enter"]);
    std::thread::sleep(Duration::from_millis(300));
    t.keys(&["C-c"]);
    t.keys(&["echo alive-$((1+1))", "Enter"]);
    t.wait_for("alive-2", 1);
    assert!(t
        .cmd(&["resize-window", "-t", "t", "-x", "120", "-y", "40"])
        .status
        .success());
    std::thread::sleep(Duration::from_millis(700));
    t.keys(&["stty size; stty -echo -icanon; exit 3", "Enter"]);
    let p = t.wait_for("DONE", 1);
    assert!(p.contains("40 120") && p.contains("EXIT=3"), "{p}");
    let read = |f: &str| std::fs::read_to_string(Path::new(&at(f))).unwrap();
    assert_eq!(
        read("before"),
        read("after"),
        "the caller's terminal modes changed"
    );
}
