//! Black-box tests of the `hull` binary's behaviour as a command-line tool (not of boxes).

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// A report whose reader went away (`hull doctor | head`) ends quietly by SIGPIPE, as `ls`
/// does, instead of panicking on the failed write (exit 101 with a backtrace hint).
#[test]
fn reports_end_quietly_when_their_reader_goes_away() {
    for args in [&["doctor", "--json"][..], &["doctor"], &["images"]] {
        let (read, write) = rustix::pipe::pipe().expect("a pipe");
        drop(read);
        let out = Command::new(common::bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .output()
            .expect("spawn hull");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "hull {args:?}: {err}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "hull {args:?}: {out:?}"
        );
    }
}

/// Bad arguments exit 125 like every other hull error (docker's convention: a program's own
/// exit codes are never hull's), naming the flag; `--help` exits 0.
#[test]
fn bad_arguments_exit_125_and_help_exits_0() {
    for args in [
        &["run", "--no-such-flag", "--", "true"][..],
        &["run", "--network", "maybe", "--", "true"],
        &["doctor", "--no-such-flag"],
        &[],
    ] {
        let out = Command::new(common::bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        assert_eq!(out.status.code(), Some(125), "hull {args:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "hull {args:?} said nothing");
    }
    for args in [&["--help"][..], &["run", "--help"], &["--version"]] {
        let out = Command::new(common::bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        assert_eq!(out.status.code(), Some(0), "hull {args:?}: {out:?}");
    }
}

/// Limits and environment names a box could not honour are refused when parsed, naming the
/// flag and the fix: a `--pids` beyond the kernel's pid_max (the cap would not be set at
/// all), `--cpus` beyond the host's, an `-e` name that is not a variable's name.
#[test]
fn limits_and_env_names_a_box_cannot_honour_are_refused_naming_the_flag() {
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("a number");
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let pids = (pid_max + 1).to_string();
    let too_many = (cpus + 1).to_string();
    for (args, said) in [
        (vec!["--pids", pids.as_str()], "--pids"),
        (vec!["--cpus", too_many.as_str()], "--cpus"),
        (vec!["-e", "1BAD=x"], "--env: `1BAD`"),
        (vec!["-e", "A-B=x"], "--env: `A-B`"),
    ] {
        let mut full = vec!["run"];
        full.extend(args.iter().copied());
        full.extend(["--", "true"]);
        let out = Command::new(common::bin())
            .args(&full)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{full:?}: {err}");
        assert!(err.contains(said), "{full:?}: {err}");
    }
    let out = Command::new(common::bin())
        .args(["run", "-e", "GOOD_1=x", "--", "sh", "-c", "echo $GOOD_1"])
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x\n");
}

/// docker's spellings beside hull's own: `-v`/`--volume` for `--mount`, `-w`/`--workdir` for
/// `--cwd`, and `--rm` accepted (every box is removed).
#[test]
fn dockers_spellings_of_mount_workdir_and_rm_are_taken() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f"), "hi\n").unwrap();
    let vol = format!("{}:/data:ro", dir.path().display());
    for args in [
        ["--rm", "-v", vol.as_str(), "-w", "/data"],
        ["--rm", "--volume", vol.as_str(), "--workdir", "/data"],
    ] {
        let mut full = vec!["run"];
        full.extend(args);
        full.extend(["--", "sh", "-c", "pwd; cat f"]);
        let out = Command::new(common::bin())
            .args(&full)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "/data\nhi\n",
            "{full:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `--hostname` names the box; `--env-file` reads NAME=VALUE lines (comments and blank lines
/// skipped) before the `-e`s, which win; a bad line is refused naming the file and line.
#[test]
fn hostname_and_env_file_are_taken_and_a_bad_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("env");
    std::fs::write(&f, "A=1\n# a comment\n\nB=two words\n").unwrap();
    let f = f.display().to_string();
    let out = Command::new(common::bin())
        .args([
            "run",
            "--hostname",
            "box7",
            "--env-file",
            &f,
            "-e",
            "B=override",
        ])
        .args(["-e", "HULL_CLI_PASSED"])
        .args([
            "--",
            "sh",
            "-c",
            "hostname; echo $A; echo $B; echo $HULL_CLI_PASSED",
        ])
        .env("HULL_CLI_PASSED", "from-caller")
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "box7\n1\noverride\nfrom-caller\n",
        "{out:?}"
    );
    // `-e NAME` of a variable the caller does not have is refused, naming it.
    let out = Command::new(common::bin())
        .args(["run", "-e", "HULL_CLI_NOT_SET_9", "--", "true"])
        .env_remove("HULL_CLI_NOT_SET_9")
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull");
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`HULL_CLI_NOT_SET_9` is not set"));
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "OK=1\nnot a pair\n").unwrap();
    let out = Command::new(common::bin())
        .args(["run", "--env-file"])
        .arg(&bad)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("--env-file") && err.contains("line 2"),
        "{err}"
    );
}

/// The shells' exit codes for a program that did not run: 127 when it is not there, 126 when it
/// is there but cannot be executed (here a file without execute permission), as bash and
/// docker give them; the fault names which.
#[test]
fn a_program_not_found_exits_127_and_one_that_cannot_run_126() {
    for (argv, code, says) in [
        (&["no-such-program"][..], 127, "not found"),
        (&["/etc/passwd"][..], 126, "cannot be executed"),
    ] {
        let out = Command::new(common::bin())
            .arg("run")
            .arg("--")
            .args(argv)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{argv:?}: {err}");
        assert!(err.contains(says), "{argv:?}: {err}");
    }
}

/// `--json` is versioned (docs/json.md): a result and an error object both carry
/// `schema_version`; a stream that is not UTF-8 comes back exactly as `stdout_b64`; a fault
/// (output cut at the cap) is never a success.
#[test]
fn json_output_is_versioned_carries_binary_output_and_a_fault_is_no_success() {
    let run = |args: &[&str]| -> serde_json::Value {
        let out = Command::new(common::bin())
            .args(["run", "--json"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"))
    };
    let v = run(&["--", "sh", "-c", "printf 'ok\\377'; printf err >&2"]);
    assert_eq!(v["schema_version"], 1, "{v}");
    assert_eq!(v["stdout_b64"], "b2v/", "{v}");
    assert_eq!(v["stdout"], "ok\u{fffd}", "{v}");
    assert!(
        v.get("stderr_b64").is_none(),
        "UTF-8 stderr needs no copy: {v}"
    );
    assert_eq!(v["success"], true, "{v}");
    let v = run(&[
        "--max-output",
        "1k",
        "--",
        "head",
        "-c",
        "5000",
        "/dev/zero",
    ]);
    assert_eq!(v["fault"]["type"], "output_limit", "{v}");
    assert_eq!(
        (v["exit_code"].as_i64(), v["success"].as_bool()),
        (Some(0), Some(false)),
        "{v}"
    );
    let v = run(&["--memory", "1k", "--", "true"]);
    assert_eq!(v["schema_version"], 1, "{v}");
    assert_eq!(v["error"]["kind"], "invalid_argument", "{v}");
}

/// A command without `--` runs, as docker's `run IMAGE CMD...` does: hull's options end at the
/// first argument that is not one, and the command keeps its own flags (`ls -l`, `--json`).
#[test]
fn a_command_without_a_double_dash_runs_with_its_own_flags() {
    let run = |args: &[&str]| {
        Command::new(common::bin())
            .arg("run")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull")
    };
    let out = run(&["-e", "A=1", "sh", "-c", "echo $A $0", "--json"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1 --json\n",
        "{out:?}"
    );
    let out = run(&["--json", "echo", "-n", "x"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON result");
    assert_eq!(v["stdout"], "x", "{v}");
    // `--` still works, and a mistyped option before the command is still refused.
    let out = run(&["--", "echo", "dash"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "dash\n", "{out:?}");
    let out = run(&["--jsn", "echo", "x"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--jsn"),
        "{out:?}"
    );
}

/// Shell completions and a man page come from the same command as `--help`, which lists the
/// environment variables hull reads.
#[test]
fn completions_man_page_and_the_environment_in_help() {
    let out = |args: &[&str]| {
        let o = Command::new(common::bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("spawn hull");
        assert!(o.status.success(), "{args:?}: {o:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for (shell, mark) in [
        ("bash", "_hull()"),
        ("zsh", "#compdef hull"),
        ("fish", "complete -c hull"),
    ] {
        let script = out(&["completions", shell]);
        assert!(
            script.contains(mark) && script.contains("pull"),
            "{shell}: {}",
            &script[..script.len().min(300)]
        );
    }
    let man = out(&["man"]);
    assert!(
        man.contains(".TH hull 1") && man.contains("HULL_HOME"),
        "{}",
        &man[..man.len().min(300)]
    );
    let help = out(&["--help"]);
    for var in [
        "HULL_HOME",
        "HULL_SANDBOXES",
        "HULL_CGROUP_PARENT",
        "HULL_TRACE_STEPS",
    ] {
        assert!(help.contains(var), "--help does not name {var}");
    }
}

/// `hull run -i` on a terminal gives the box a pipe fed from the terminal, never the terminal:
/// code in the box cannot change the caller's terminal (`stty -echo -icanon` left the user's
/// shell without echo before), and what the user types still reaches it. Driven through a real
/// pseudo-terminal (Python's `pty`, the simplest way to get one here).
#[test]
fn interactive_input_on_a_terminal_is_relayed_and_the_terminal_left_alone() {
    let script = r#"
import os, pty, subprocess, sys, termios
m, s = pty.openpty()
p = subprocess.Popen([sys.argv[1], "run", "-i", "--", "sh", "-c", "stty -echo -icanon 2>/dev/null; echo stty:$?; read line; echo got:$line"], stdin=s, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
os.write(m, b"hello\n")
out, err = p.communicate(timeout=60)
lflag = termios.tcgetattr(s)[3]
print(out.decode().replace("\n", " ").strip(), bool(lflag & termios.ECHO), bool(lflag & termios.ICANON), p.returncode)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(common::bin())
        .stdin(Stdio::null())
        .output()
        .expect("python3 drives the pty");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.trim(), "stty:1 got:hello True True 0", "{out:?}");
}

/// A bind at /tmp or /dev/shm takes the place of the box's scratch tmpfs there (kern's images
/// read and write those); a tmpfs below it gets its mount point made by the box, in the host
/// directory (see `binds_and_tmpfs_below_host_directories_never_follow_planted_links`).
#[test]
fn a_bind_at_tmp_or_dev_shm_takes_the_scratch_tmpfs_place() {
    let tmp = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    for d in [tmp.path(), shm.path()] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    let out = Command::new(common::bin())
        .args(["run", "-v"])
        .arg(format!("{}:/tmp", tmp.path().display()))
        .arg("-v")
        .arg(format!("{}:/dev/shm", shm.path().display()))
        .args(["--", "sh", "-c", "echo a > /tmp/a && echo b > /dev/shm/b"])
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("a")).unwrap(),
        "a\n"
    );
    assert_eq!(
        std::fs::read_to_string(shm.path().join("b")).unwrap(),
        "b\n"
    );
    let out = Command::new(common::bin())
        .args(["run", "-v"])
        .arg(format!("{}:/tmp", tmp.path().display()))
        .args([
            "--tmpfs",
            "/tmp/c=8m",
            "--",
            "stat",
            "-f",
            "-c",
            "%T",
            "/tmp/c",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("spawn hull");
    // A tmpfs below the bind: its mount point is made in the bound directory, by the box.
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "tmpfs\n");
    assert!(tmp.path().join("c").is_dir());
}

/// `hull` with these arguments and environment: (exit code, stderr).
fn stderr_of(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(common::bin())
        .args(args)
        .env_remove("HULL_LOG")
        .env_remove("HULL_TRACE_STEPS")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `-q` and `HULL_LOG=error` silence warnings (here: a cap this cgroup parent cannot enforce),
/// `--verbose` (or `-v` before the subcommand) says how the box was set up and ended, twice
/// adds the step trace; a bad `HULL_LOG` is refused naming it.
#[test]
fn quiet_verbose_and_hull_log_set_what_is_said() {
    let nocg = [("HULL_CGROUP_PARENT", "hull-test-no-such-parent")];
    let (code, err) = stderr_of(&["run", "--", "true"], &nocg);
    assert!(
        code == 0 && err.contains("hull: warning: pids cap not enforced"),
        "{err}"
    );
    for args in [
        &["run", "-q", "--", "true"][..],
        &["-q", "run", "--", "true"],
    ] {
        let (code, err) = stderr_of(args, &nocg);
        assert_eq!((code, err.as_str()), (0, ""), "{args:?}");
    }
    let (code, err) = stderr_of(&["run", "--", "true"], &[nocg[0], ("HULL_LOG", "error")]);
    assert_eq!((code, err.as_str()), (0, ""));
    for args in [
        &["run", "--verbose", "--", "true"][..],
        &["-v", "run", "--", "true"],
    ] {
        let (code, err) = stderr_of(args, &[]);
        assert!(
            code == 0
                && err.contains("hull: box: `true`")
                && err.contains("hull: the box ended: exit code 0"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("hull trace"), "{err}");
    }
    let (_, err) = stderr_of(&["run", "--verbose", "--verbose", "--", "true"], &[]);
    assert!(
        err.contains("hull trace:") && err.contains("box: step"),
        "{err}"
    );
    let (_, err) = stderr_of(&["run", "--", "true"], &[("HULL_LOG", "info")]);
    assert!(err.contains("hull: box: `true`"), "{err}");
    for args in [&["run", "--", "true"][..], &["images"]] {
        let (code, err) = stderr_of(args, &[("HULL_LOG", "loud")]);
        assert!(
            code == 125 && err.contains("HULL_LOG=loud") && err.contains("debug"),
            "{args:?}: {err}"
        );
    }
    // Every command takes -q (a report prints its report, not its notices).
    let (code, _) = stderr_of(&["images", "-q"], &[]);
    assert_eq!(code, 0);
}

/// `hull` with these arguments: (exit code, stdout, stderr).
fn outputs(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `-u/--user` runs the command as a user of the image with no capability and no way back to
/// root (setuid(0) is refused with EPERM), its HOME and USER set, the temporary workspace its
/// own; ids without an entry run as given; root is root; an unknown user is refused naming
/// the flag.
#[test]
fn run_as_a_user_of_the_image() {
    let script = "id -u; id -g; echo $HOME $USER; touch /workspace/f; stat -c %u /workspace/f; grep CapEff /proc/self/status; python3 -c 'import os\ntry:\n    os.setuid(0)\n    print(\"became root\")\nexcept PermissionError as e:\n    print(\"setuid\", e.errno)'";
    let (code, out, err) = outputs(&["run", "-u", "nobody", "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out, "65534\n65534\n/nonexistent nobody\n65534\nCapEff:\t0000000000000000\nsetuid 1\n",
        "{err}"
    );
    let (code, out, _) = outputs(&[
        "run",
        "--user",
        "1000:1001",
        "--",
        "sh",
        "-c",
        "id -u; id -g; echo $HOME",
    ]);
    assert_eq!((code, out.as_str()), (0, "1000\n1001\n/\n"));
    let (code, out, _) = outputs(&["run", "-u", "root", "--", "id", "-u"]);
    assert_eq!((code, out.as_str()), (0, "0\n"));
    let (code, _, err) = outputs(&["run", "-u", "nosuchuser", "--", "true"]);
    assert!(
        code == 125 && err.contains("-u/--user nosuchuser: no user `nosuchuser`"),
        "{err}"
    );
    let (_, plan, _) = outputs(&["run", "-u", "nobody", "--plan", "--", "true"]);
    assert!(
        plan.contains("switch to uid 65534 gid 65534")
            && plan.contains("lchown /workspace to 65534:65534"),
        "{plan}"
    );
}

/// Targets inside a host directory: a bind below /workspace (a directory and a read-only file),
/// a tmpfs below /workspace and below another bind. Their mount points are made by the box,
/// never through a link: a symlink the workspace holds (another box may have planted it, absolute
/// or climbing out) fails the run instead of steering the mount, and the run says which target.
#[test]
fn binds_and_tmpfs_below_host_directories_never_follow_planted_links() {
    let d = tempfile::tempdir().unwrap();
    let (ws, data) = (d.path().join("ws"), d.path().join("data"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("f"), "in data\n").unwrap();
    let conf = d.path().join("app.conf");
    std::fs::write(&conf, "conf\n").unwrap();
    let (ws_s, data_s, conf_s) = (
        ws.display().to_string(),
        data.display().to_string(),
        conf.display().to_string(),
    );
    let script = "cat /workspace/sub/f /workspace/etc/app.conf; echo new > /workspace/sub/g && echo wrote; (echo x > /workspace/etc/app.conf) 2>/dev/null || echo conf-ro; stat -f -c %T /workspace/scratch /data/cache";
    let (code, out, err) = outputs(&[
        "run",
        "--workspace",
        &ws_s,
        "-v",
        &format!("{data_s}:/workspace/sub"),
        "-v",
        &format!("{conf_s}:/workspace/etc/app.conf:ro"),
        "--tmpfs",
        "/workspace/scratch=1m",
        "-v",
        &format!("{data_s}:/data"),
        "--tmpfs",
        "/data/cache=1m",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out, "in data\nconf\nwrote\nconf-ro\ntmpfs\ntmpfs\n",
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(data.join("g")).unwrap(), "new\n");
    // Links planted in the workspace: to the host's /etc, climbing out, and in the middle.
    std::os::unix::fs::symlink("/etc", ws.join("abs")).unwrap();
    std::os::unix::fs::symlink("../../..", ws.join("up")).unwrap();
    std::os::unix::fs::symlink(&conf, ws.join("flink")).unwrap();
    for (flag, value, target) in [
        ("-v", format!("{data_s}:/workspace/abs"), "/workspace/abs"),
        ("-v", format!("{data_s}:/workspace/up/x"), "/workspace/up/x"),
        (
            "--tmpfs",
            "/workspace/abs/t=1m".to_string(),
            "/workspace/abs/t",
        ),
        (
            "-v",
            format!("{conf_s}:/workspace/abs/passwd"),
            "/workspace/abs/passwd",
        ),
        // A link as the file's own name: never mounted over.
        (
            "-v",
            format!("{conf_s}:/workspace/flink"),
            "/workspace/flink",
        ),
    ] {
        let (code, out, err) = outputs(&[
            "run",
            "--workspace",
            &ws_s,
            flag,
            &value,
            "--",
            "sh",
            "-c",
            "echo ran",
        ]);
        // Named by the caller's flag, with the link as the reason.
        let named = if flag == "-v" {
            "--mount: "
        } else {
            "--tmpfs: "
        };
        assert!(
            code == 125
                && out.is_empty()
                && err.contains(target)
                && err.contains(named)
                && err.contains("a symbolic link or a file is on the way"),
            "{value}: {out}{err}"
        );
    }
    let (code, _, err) = outputs(&["run", "-v", &format!("{data_s}:/workspace"), "--", "true"]);
    assert!(
        code == 125 && err.contains("choose its host directory as the workspace"),
        "{err}"
    );
}

/// Binds under /etc: the `host` image's /etc is hull's, so a new file or directory may be added
/// (not over hull's own passwd, hosts...); inside an image's read-only bind (an image's /etc, the
/// host's /etc/ssl, /usr) a mount covers what the image has and is refused, naming why, where the
/// image has nothing (or a symbolic link on the way), and /etc itself stays refused.
#[test]
fn binds_under_etc_add_to_hulls_etc_or_cover_what_the_image_has() {
    let d = tempfile::tempdir().unwrap();
    let conf = d.path().join("app.conf");
    std::fs::write(&conf, "mine\n").unwrap();
    let dir = d.path().join("conf.d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("x"), "x\n").unwrap();
    let (conf, dir) = (conf.display().to_string(), dir.display().to_string());
    let (code, out, err) = outputs(&[
        "run",
        "-v",
        &format!("{conf}:/etc/app.conf:ro"),
        "-v",
        &format!("{dir}:/etc/nginx/conf.d"),
        "--",
        "sh",
        "-c",
        "cat /etc/app.conf /etc/nginx/conf.d/x; head -1 /etc/passwd",
    ]);
    assert_eq!(
        (code, out.as_str()),
        (0, "mine\nx\nroot:x:0:0:root:/tmp:/bin/sh\n"),
        "{err}"
    );
    for (target, why) in [
        ("/etc/passwd", "hull writes /etc/passwd itself"),
        ("/etc/hosts", "hull writes /etc/hosts itself"),
        (
            "/usr/hull-no-such-file",
            "the image has no /usr/hull-no-such-file",
        ),
        ("/etc", "/etc is set up by hull itself"),
    ] {
        let (code, _, err) = outputs(&["run", "-v", &format!("{conf}:{target}"), "--", "true"]);
        assert!(code == 125 && err.contains(why), "{target}: {err}");
    }
    let Some(bb) = Some(std::path::Path::new("/bin/busybox")).filter(|p| p.exists()) else {
        hull_testkit::skip_part("image", "/bin/busybox (busybox-static) is not installed");
        return;
    };
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bin")).unwrap();
    std::fs::create_dir_all(root.path().join("etc/app")).unwrap();
    std::fs::copy(bb, root.path().join("bin/busybox")).unwrap();
    std::fs::write(root.path().join("etc/app/app.conf"), "image's\n").unwrap();
    std::os::unix::fs::symlink("/etc", root.path().join("etc/link")).unwrap();
    let rootfs = root.path().display().to_string();
    let (code, out, err) = outputs(&[
        "run",
        "--rootfs",
        &rootfs,
        "-v",
        &format!("{conf}:/etc/app/app.conf:ro"),
        "--",
        "/bin/busybox",
        "cat",
        "/etc/app/app.conf",
    ]);
    assert_eq!((code, out.as_str()), (0, "mine\n"), "{err}");
    for target in ["/etc/new.conf", "/etc/link/passwd"] {
        let (code, _, err) = outputs(&[
            "run",
            "--rootfs",
            &rootfs,
            "-v",
            &format!("{conf}:{target}"),
            "--",
            "/bin/busybox",
            "true",
        ]);
        assert!(
            code == 125 && err.contains(&format!("the image has no {target}")),
            "{target}: {err}"
        );
    }
}

/// As host root a workspace reaches the box as an idmapped copy of the host's mount; when that
/// mount is shared (systemd makes / shared), a tmpfs the box mounts below /workspace must not
/// propagate back to the host (the copy is made private).
#[test]
fn a_mount_below_a_shared_workspace_stays_in_the_box() {
    if !rustix::process::geteuid().is_root() {
        hull_testkit::skip(
            "making a shared host mount needs root (the rootless box maps no host mount)",
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let ws = d.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let sh = |args: &[&str]| Command::new("mount").args(args).status().unwrap().success();
    let w = ws.display().to_string();
    assert!(sh(&["--bind", &w, &w]) && sh(&["--make-shared", &w]));
    let (code, out, err) = outputs(&[
        "run",
        "--workspace",
        &w,
        "--tmpfs",
        "/workspace/t=1m",
        "--",
        "sh",
        "-c",
        "stat -f -c %T /workspace/t; grep -c shared: /proc/self/mountinfo || true",
    ]);
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let _ = Command::new("umount").arg("-R").arg(&w).status();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "tmpfs\n0\n", "{err}");
    assert!(
        !host.contains(&format!("{w}/t ")),
        "the box's tmpfs reached the host:\n{host}"
    );
}
