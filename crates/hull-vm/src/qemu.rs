//! QEMU's command line for one VM: the `microvm` machine (no PCI bus, no firmware tables but
//! ACPI's, virtio over MMIO), the guest kernel and hull's initramfs, guest RAM as a shared
//! memfd (vhost-user needs to map it), a virtio-fs device per share (each served by its own
//! virtiofsd on a unix socket), the agent's virtio-serial port on a unix socket hull listens
//! on, and the serial console to a file (read back when the guest fails); a virtio-net device
//! only with the gateway network (its frames on a datagram socket hull passes). No display, no
//! default devices, no reboot.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::accel::Accel;

/// One virtio-fs share: its tag in the guest and virtiofsd's socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    pub tag: String,
    pub socket: PathBuf,
}

/// Everything QEMU's command line is made of.
#[derive(Clone, Debug)]
pub struct Machine {
    pub accel: Accel,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    pub cpus: u32,
    pub shares: Vec<Share>,
    /// The agent channel's socket (hull listens; QEMU connects).
    pub agent: PathBuf,
    /// Where the guest's serial console is written.
    pub console: PathBuf,
    /// Under TCG: the host's TSC frequency, given to the guest (see [`crate::accel::host_tsc_khz`]).
    pub tsc_khz: Option<u64>,
    /// As host root: the ids QEMU switches to, and the empty directory it changes root to,
    /// once its files and sockets are open (`-run-with`).
    pub run_as: Option<(crate::sys::Ids, PathBuf)>,
    /// The network device's MAC and MTU; its link is QEMU's descriptor [`NET_FD`].
    pub net: Option<([u8; 6], u32)>,
}

/// The descriptor QEMU is given its network link on (a datagram socket, see
/// [`crate::vm::run_linked`]).
pub const NET_FD: i32 = 3;

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

/// `key=value` with a path value.
fn kv(prefix: &str, path: &std::path::Path) -> OsString {
    let mut s = OsString::from(prefix);
    s.push(path.as_os_str());
    s
}

impl Machine {
    /// QEMU's arguments (after the program's name).
    pub fn argv(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| a.extend(items.iter().map(os));
        push(&["-M", "microvm,acpi=on"]);
        match &self.accel {
            Accel::Kvm { cpu } => push(&["-accel", "kvm", "-cpu", cpu]),
            // A 32 MiB translation cache instead of the default: ~20 MiB less per VM (docs/vm.md).
            Accel::Tcg { .. } => push(&["-accel", "tcg,tb-size=32", "-cpu", "max"]),
        }
        let mem = format!("{}M", self.memory_mib);
        push(&[
            "-m",
            &mem,
            "-object",
            &format!("memory-backend-memfd,id=mem,size={mem},share=on"),
            "-machine",
            "memory-backend=mem",
            "-smp",
            &self.cpus.to_string(),
            "-nodefaults",
            "-no-user-config",
            "-nographic",
            "-no-reboot",
            // QEMU's own seccomp filter: a guest that takes over a device model cannot spawn
            // a process, gain privileges, change scheduling or use obsolete calls.
            "-sandbox",
            // QEMU loads its filter before `-run-with` changes ids, so the filter must allow
            // that one change; after it every id is hull's and no capability is left.
            if self.run_as.is_some() {
                "on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny"
            } else {
                "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
            },
            // microvm's virtio-mmio is legacy by default, which vhost-user-fs refuses.
            "-global",
            "virtio-mmio.force-legacy=false",
        ]);
        if let Some((ids, empty)) = &self.run_as {
            a.push(os("-run-with"));
            a.push(kv(&format!("user={}:{},chroot=", ids.uid, ids.gid), empty));
        }
        let mut cmdline = String::from("console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init");
        if let (Accel::Tcg { .. }, Some(khz)) = (&self.accel, self.tsc_khz) {
            cmdline.push_str(&format!(" tsc_early_khz={khz} tsc=reliable"));
        }
        a.extend([os("-append"), os(cmdline)]);
        a.extend([os("-kernel"), os(&self.kernel)]);
        a.extend([os("-initrd"), os(&self.initramfs)]);
        a.extend([
            os("-chardev"),
            kv("file,id=console,path=", &self.console),
            os("-serial"),
            os("chardev:console"),
        ]);
        for (i, s) in self.shares.iter().enumerate() {
            a.extend([
                os("-chardev"),
                kv(&format!("socket,id=fs{i},path="), &s.socket),
                os("-device"),
                os(format!("vhost-user-fs-device,chardev=fs{i},tag={}", s.tag)),
            ]);
        }
        if let Some((mac, mtu)) = self.net {
            let mac: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
            a.extend([
                os("-netdev"),
                os(format!("dgram,id=net0,local.type=fd,local.str={NET_FD}")),
                os("-device"),
                os(format!(
                    "virtio-net-device,netdev=net0,mac={},host_mtu={mtu}",
                    mac.join(":")
                )),
            ]);
        }
        a.extend([
            os("-device"),
            os("virtio-serial-device"),
            os("-chardev"),
            kv("socket,id=agent,path=", &self.agent),
            os("-device"),
            os(format!(
                "virtserialport,chardev=agent,name={}",
                crate::proto::PORT_NAME
            )),
        ]);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The machine's arguments as text.
    fn text(m: &Machine) -> Vec<String> {
        m.argv()
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_command_line_has_the_shares_the_agent_port_and_shared_memory() {
        let m = Machine {
            accel: Accel::Tcg { why: "test".into() },
            kernel: "/k/vmlinuz".into(),
            initramfs: "/c/initramfs.cpio.gz".into(),
            memory_mib: 512,
            cpus: 2,
            shares: vec![Share {
                tag: "hull.root".into(),
                socket: "/run/x/root.sock".into(),
            }],
            agent: "/run/x/agent.sock".into(),
            console: "/run/x/console.log".into(),
            tsc_khz: Some(2_100_000),
            run_as: None,
            net: None,
        };
        let line = text(&m);
        let after = |flag: &str, n: usize| -> Vec<&str> {
            line.iter()
                .enumerate()
                .filter(|(_, v)| *v == flag)
                .map(|(i, _)| line[i + 1].as_str())
                .take(n)
                .collect()
        };
        assert_eq!(after("-accel", 1), ["tcg,tb-size=32"]);
        assert_eq!(after("-m", 1), ["512M"]);
        assert_eq!(after("-smp", 1), ["2"]);
        assert_eq!(
            after("-sandbox", 1),
            ["on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"]
        );
        assert!(line.contains(&"memory-backend-memfd,id=mem,size=512M,share=on".to_string()));
        assert!(line.contains(&"socket,id=fs0,path=/run/x/root.sock".to_string()));
        assert!(line.contains(&"vhost-user-fs-device,chardev=fs0,tag=hull.root".to_string()));
        assert!(line.contains(&"virtserialport,chardev=agent,name=hull.agent".to_string()));
        assert!(line.contains(&"socket,id=agent,path=/run/x/agent.sock".to_string()));
        assert!(
            !line.iter().any(|a| a.contains("netdev")),
            "no network device"
        );
        let kvm = Machine {
            accel: Accel::Kvm { cpu: "host" },
            ..m.clone()
        };
        let kline = text(&kvm);
        assert!(kline.windows(2).any(|w| w[0] == "-cpu" && w[1] == "host"));
        assert!(
            !kline.iter().any(|a| a.contains("tsc_early_khz")),
            "kvmclock under KVM"
        );
        assert!(line
            .iter()
            .any(|a| a.ends_with("tsc_early_khz=2100000 tsc=reliable")));
        assert!(
            !line.iter().any(|a| a == "-run-with"),
            "no id change unasked"
        );
        let as_root = Machine {
            run_as: Some((
                crate::sys::Ids {
                    uid: 2_147_287_040,
                    gid: 2_147_287_041,
                },
                "/run/x/empty".into(),
            )),
            ..m
        };
        let rline = text(&as_root);
        assert!(rline.windows(2).any(
            |w| w[0] == "-run-with" && w[1] == "user=2147287040:2147287041,chroot=/run/x/empty"
        ));
        assert!(rline.iter().any(|a| a.contains("elevateprivileges=allow")));
        let netted = Machine {
            net: Some(([0x02, 0x48, 0x55, 0x4c, 0x4c, 0x01], 65520)),
            ..as_root
        };
        let nline = text(&netted);
        assert!(nline.contains(&"dgram,id=net0,local.type=fd,local.str=3".to_string()));
        assert!(nline.contains(
            &"virtio-net-device,netdev=net0,mac=02:48:55:4c:4c:01,host_mtu=65520".to_string()
        ));
    }
}
