//! Fake cgroup trees in a tempdir: control files as plain files, and a [`DirOps`] double that does
//! what cgroupfs does on mkdir (populate the new cgroup's control files) and rmdir (refuse while
//! processes or child cgroups remain, else remove the files with the directory).

#![allow(dead_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hull_cgroup::{DirOps, Host, Probe};

pub struct FakeTree {
    pub tmp: tempfile::TempDir,
}

impl FakeTree {
    pub fn new() -> FakeTree {
        FakeTree {
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// Makes directory `rel` (and parents) holding `files`.
    pub fn cgroup(&self, rel: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.path(rel);
        fs::create_dir_all(&dir).unwrap();
        for (name, value) in files {
            fs::write(dir.join(name), value).unwrap();
        }
        dir
    }

    pub fn write(&self, rel: &str, value: &str) {
        fs::write(self.path(rel), value).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// A mountinfo line mounting hierarchy directory `root` of a `fstype` filesystem at `rel`.
    pub fn mount_line(
        &self,
        id: u32,
        root: &str,
        rel: &str,
        opts: &str,
        fstype: &str,
        super_opts: &str,
    ) -> String {
        format!(
            "{id} 1 0:{id} {root} {} {opts} shared:{id} - {fstype} {fstype} {super_opts}\n",
            self.path(rel).display()
        )
    }

    pub fn host(&self, mountinfo: &str, proc_cgroup: &str, parent: Option<&str>) -> Host {
        self.host_as(mountinfo, proc_cgroup, parent, 0, 4242)
    }

    pub fn host_as(
        &self,
        mountinfo: &str,
        proc_cgroup: &str,
        parent: Option<&str>,
        euid: u32,
        pid: u32,
    ) -> Host {
        let probe = Probe {
            mountinfo,
            proc_self_cgroup: proc_cgroup,
            parent_override: parent,
            euid,
            pid,
        };
        Host::detect_from_probe(&probe)
            .unwrap()
            .with_dir_ops(Arc::new(FakeKernfs))
    }
}

/// The kernel-side behaviour of cgroupfs directories, imitated over plain files.
#[derive(Debug)]
pub struct FakeKernfs;

const V2_CORE: &[(&str, &str)] = &[
    ("cgroup.procs", ""),
    ("cgroup.subtree_control", ""),
    ("cgroup.events", "populated 0\nfrozen 0\n"),
    ("cgroup.kill", ""),
    ("cgroup.type", "domain\n"),
];

fn v2_controller_files(controller: &str) -> &'static [(&'static str, &'static str)] {
    match controller {
        "memory" => &[
            ("memory.max", "max\n"),
            ("memory.swap.max", "max\n"),
            ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"),
            ("memory.peak", "0\n"),
        ],
        "pids" => &[("pids.max", "max\n"), ("pids.events", "max 0\n")],
        "cpu" => &[("cpu.max", "max 100000\n")],
        _ => &[],
    }
}

impl DirOps for FakeKernfs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)?;
        let parent = path.parent().unwrap();
        if let Ok(on) = fs::read_to_string(parent.join("cgroup.subtree_control")) {
            let on: Vec<String> = on
                .split_whitespace()
                .map(|w| w.trim_start_matches('+').to_owned())
                .collect();
            for (name, value) in V2_CORE {
                fs::write(path.join(name), value)?;
            }
            fs::write(path.join("cgroup.controllers"), on.join(" "))?;
            for c in &on {
                for (name, value) in v2_controller_files(c) {
                    fs::write(path.join(name), value)?;
                }
            }
        } else {
            // v1: a child carries the same control files as its parent, with default contents.
            for entry in fs::read_dir(parent)? {
                let entry = entry?;
                if !entry.file_type()?.is_file() {
                    continue;
                }
                let name = entry.file_name();
                let value = match name.to_str() {
                    Some("cgroup.procs" | "tasks") => String::new(),
                    _ => fs::read_to_string(entry.path())?,
                };
                fs::write(path.join(&name), value)?;
            }
        }
        Ok(())
    }

    fn rmdir(&self, path: &Path) -> io::Result<()> {
        let busy = || io::Error::from_raw_os_error(libc::EBUSY);
        if fs::read_to_string(path.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty()) {
            return Err(busy());
        }
        for entry in fs::read_dir(path)? {
            if entry?.file_type()?.is_dir() {
                return Err(busy());
            }
        }
        fs::remove_dir_all(path)
    }
}
