//! The gateway network's box side (`Network::Gateway`): the box gets a configured TAP in its own
//! network namespace, the caller gets the TAP's descriptor before the box's program starts, and
//! the box keeps neither the descriptor nor any way to reconfigure its link or reach the link
//! layer. Real namespaces; runs as root and unprivileged (`/dev/net/tun` openable by the user,
//! as `scripts/setup.sh` leaves it). Every frame stays on the box's own TAP: nothing is sent to
//! any host's network.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hull_box::{
    BoxError, BoxSpec, Handoff, Network, NoSink, RunOptions, RunResult, Runtime, Tap, TapHandler,
};

fn python(code: &str) -> BoxSpec {
    let mut spec = BoxSpec::new(vec!["python3".into(), "-c".into(), code.into()]);
    spec.network = Network::Gateway;
    spec
}

/// Runs `spec` handing its TAP to `take`.
fn run_taking(
    rt: &Runtime,
    spec: &BoxSpec,
    take: &mut TapHandler<'_>,
) -> Result<RunResult, BoxError> {
    rt.run_with(
        spec,
        RunOptions { capture: true },
        &mut NoSink,
        Handoff {
            fuse: None,
            tap: Some(take),
        },
    )
}

/// Python that prints the box's view of its link: interfaces, eth0's address, netmask, MTU and
/// MAC (ioctls), the routes and resolv.conf.
const SHOW_LINK: &str = r#"
import socket, fcntl, struct
print('IFS', sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
req = struct.pack('256s', b'eth0')
print('ADDR', socket.inet_ntoa(fcntl.ioctl(s, 0x8915, req)[20:24]))
print('MASK', socket.inet_ntoa(fcntl.ioctl(s, 0x891b, req)[20:24]))
print('MTU', struct.unpack('i', fcntl.ioctl(s, 0x8921, req)[16:20])[0])
print('MAC', fcntl.ioctl(s, 0x8927, req)[18:24].hex(':'))
for l in open('/proc/net/route').readlines()[1:]:
    f = l.split()
    print('ROUTE', f[0], socket.inet_ntoa(struct.pack('<I', int(f[1], 16))), socket.inet_ntoa(struct.pack('<I', int(f[2], 16))), f[3])
print('RESOLV', open('/etc/resolv.conf').read().strip())
"#;

#[test]
fn a_gateway_box_has_a_configured_tap_with_a_default_route_via_the_gateway() {
    let rt = Runtime::new().expect("runtime");
    let mut taps = Vec::new();
    let r = run_taking(&rt, &python(SHOW_LINK), &mut |tap: Tap| {
        taps.push(tap.fd);
        Ok(())
    })
    .expect("box runs");
    assert!(r.success, "{r:?}");
    assert_eq!(taps.len(), 1, "one TAP handed over");
    let out = &r.stdout;
    assert!(out.contains("IFS ['eth0', 'lo']"), "{out}");
    assert!(out.contains("ADDR 10.0.2.100\n"), "{out}");
    assert!(out.contains("MASK 255.255.255.0\n"), "{out}");
    assert!(out.contains("MTU 65520\n"), "{out}");
    assert!(out.contains("MAC 02:48:55:4c:4c:01\n"), "{out}");
    // The default route (flags 0003: up, gateway) and the link's own prefix.
    assert!(out.contains("ROUTE eth0 0.0.0.0 10.0.2.2 0003\n"), "{out}");
    assert!(out.contains("ROUTE eth0 10.0.2.0 0.0.0.0 0001\n"), "{out}");
    assert!(out.contains("RESOLV nameserver 10.0.2.2\n"), "{out}");
}

#[test]
fn a_box_without_the_gateway_network_is_unchanged() {
    let rt = Runtime::new().expect("runtime");
    let mut spec = python(
        "print('IFS', sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\nprint('RESOLV', open('/etc/resolv.conf').read().strip())",
    );
    spec.network = Network::None;
    let r = rt
        .run(&spec, RunOptions { capture: true }, &mut NoSink)
        .expect("box runs");
    assert!(r.success, "{r:?}");
    assert!(r.stdout.contains("IFS ['lo']\n"), "{}", r.stdout);
    assert!(
        r.stdout.contains("RESOLV # no network in this box"),
        "{}",
        r.stdout
    );
}

/// Reads frames from `tap` until one is an ARP request from the box's MAC and address for the
/// gateway's, or `within` passes; returns it.
fn arp_for_gateway(tap: &OwnedFd, within: Duration) -> Option<Vec<u8>> {
    let end = Instant::now() + within;
    let mut buf = vec![0u8; 65536];
    while Instant::now() < end {
        let mut fds = [libc::pollfd {
            fd: tap.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one pollfd that lives for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 100) };
        if n <= 0 {
            continue;
        }
        let n = rustix_read(tap, &mut buf)?;
        let f = &buf[..n];
        // Ethernet: dst 0..6, src 6..12, type 12..14; ARP: op 20..22, sender ip 28..32,
        // target ip 38..42.
        if n >= 42
            && f[6..12] == [0x02, 0x48, 0x55, 0x4c, 0x4c, 0x01]
            && f[12..14] == [0x08, 0x06]
            && f[20..22] == [0, 1]
            && f[28..32] == [10, 0, 2, 100]
            && f[38..42] == [10, 0, 2, 2]
        {
            return Some(f.to_vec());
        }
    }
    None
}

fn rustix_read(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: reads into a buffer that lives for the call.
    let n = unsafe { libc::read(fd.as_fd().as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    usize::try_from(n).ok()
}

#[test]
fn the_handed_over_descriptor_is_the_boxs_tap_and_the_program_waits_for_the_handler() {
    let rt = Runtime::new().expect("runtime");
    let ws = tempfile::tempdir().expect("workspace");
    std::fs::set_permissions(
        ws.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    // The program marks its start, then sends one datagram to the gateway's discard port: the
    // box's kernel first asks for the gateway's MAC, on the TAP.
    let mut spec = python(
        "import socket\nopen('/workspace/started', 'w').close()\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('10.0.2.2', 9))\nprint('SENT')",
    );
    spec.workspace = Some(ws.path().to_path_buf());
    let started = ws.path().join("started");
    let (tx, rx) = mpsc::channel();
    let mut started_before_handler_returned = None;
    let (r, teardown) = rt
        .run_detached_with(
            &spec,
            RunOptions { capture: true },
            &mut NoSink,
            None,
            Handoff {
                fuse: None,
                tap: Some(&mut |tap: Tap| {
                    // The program must not run before this returns.
                    std::thread::sleep(Duration::from_millis(300));
                    started_before_handler_returned = Some(started.exists());
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        let _ = tx.send(arp_for_gateway(&tap.fd, Duration::from_secs(10)));
                    });
                    Ok(())
                }),
            },
        )
        .expect("box runs");
    assert!(r.success, "{r:?}");
    assert!(r.stdout.contains("SENT"), "{r:?}");
    assert_eq!(started_before_handler_returned, Some(false));
    assert!(started.exists());
    // The box's network lives until its teardown: the frame is read before it.
    let frame = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("reader thread");
    drop(teardown);
    let frame = frame.expect("an ARP request for 10.0.2.2 from the box's MAC on the TAP");
    assert_eq!(&frame[6..12], &[0x02, 0x48, 0x55, 0x4c, 0x4c, 0x01]);
}

#[test]
fn a_failing_handler_ends_the_box_before_its_program_starts() {
    let rt = Runtime::new().expect("runtime");
    let ws = tempfile::tempdir().expect("workspace");
    std::fs::set_permissions(
        ws.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("chmod");
    let mut spec = python("open('/workspace/started', 'w').close()");
    spec.workspace = Some(ws.path().to_path_buf());
    let e = run_taking(&rt, &spec, &mut |_tap: Tap| {
        Err(std::io::Error::other("no gateway today"))
    })
    .expect_err("the box must not run without its gateway");
    assert!(matches!(e, BoxError::Gateway { .. }), "{e:?}");
    assert_eq!(e.kind(), "gateway");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ws.path().join("started").exists(), "the program ran");
}

#[test]
fn a_gateway_box_without_a_handler_is_refused() {
    let rt = Runtime::new().expect("runtime");
    let e = rt
        .run(
            &python("print(1)"),
            RunOptions { capture: true },
            &mut NoSink,
        )
        .expect_err("no handler for the TAP");
    assert!(matches!(e, BoxError::NoTapHandler), "{e:?}");
}

/// Python that tries to take the link down, change its address, open a raw IP socket and a
/// packet socket, and looks for a `/dev/net/tun` descriptor in every process of the box.
const TRY_ESCAPE: &str = r#"
import socket, fcntl, struct, errno, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def attempt(name, f):
    try:
        f(); print(name, 'DONE')
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
attempt('DOWN', lambda: fcntl.ioctl(s, 0x8914, struct.pack('16sh', b'eth0', 0) + bytes(22)))
attempt('ADDR', lambda: fcntl.ioctl(s, 0x8916, struct.pack('16sHH4s', b'eth0', socket.AF_INET, 0, bytes([10, 0, 2, 7])) + bytes(16)))
attempt('MTU', lambda: fcntl.ioctl(s, 0x8922, struct.pack('16si', b'eth0', 1280) + bytes(20)))
attempt('RAW', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt('PACKET', lambda: socket.socket(17, socket.SOCK_RAW, 0))
attempt('TUN', lambda: open('/dev/net/tun', 'rb'))
tun, seen = 0, 0
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        fds = os.listdir(f'/proc/{pid}/fd')
    except OSError:
        continue
    seen += 1
    for fd in fds:
        try:
            if os.readlink(f'/proc/{pid}/fd/{fd}') == '/dev/net/tun': tun += 1
        except OSError:
            pass
print('TUNFDS', tun, 'PROCS', seen)
print('CAPEFF', [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])
"#;

#[test]
fn a_gateway_box_cannot_reconfigure_its_link_reach_the_link_layer_or_hold_the_tap() {
    let rt = Runtime::new().expect("runtime");
    let mut pid1 = 0;
    let (r, teardown) = rt
        .run_detached_with(
            &python(TRY_ESCAPE),
            RunOptions { capture: true },
            &mut NoSink,
            None,
            Handoff {
                fuse: None,
                tap: Some(&mut |tap: Tap| {
                    pid1 = tap.pid;
                    drop(tap.fd);
                    Ok(())
                }),
            },
        )
        .expect("box runs");
    let out = &r.stdout;
    assert!(r.success, "{r:?}");
    // No CAP_NET_ADMIN over the box's network namespace: its own user namespace owns it, and
    // the box dropped every capability there.
    assert!(out.contains("DOWN EPERM\n"), "{out}");
    assert!(out.contains("ADDR EPERM\n"), "{out}");
    assert!(out.contains("MTU EPERM\n"), "{out}");
    // No CAP_NET_RAW; packet sockets are refused by the seccomp filter's socket families.
    assert!(out.contains("RAW EPERM\n"), "{out}");
    assert!(out.contains("PACKET EAFNOSUPPORT\n"), "{out}");
    // The device is not in the box's /dev.
    assert!(out.contains("TUN ENOENT\n"), "{out}");
    assert!(out.contains("TUNFDS 0 "), "{out}");
    assert!(!out.contains("PROCS 0\n"), "{out}");
    assert!(out.contains("CAPEFF 0000000000000000\n"), "{out}");
    // Pid 1, still there until the teardown, holds no copy either (seen from the host; pid 1
    // also closes every descriptor but its channel and stdio before the program starts).
    assert!(pid1 > 0);
    let links: Vec<String> = std::fs::read_dir(format!("/proc/{pid1}/fd"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|p| p.display().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !links.iter().any(|l| l == "/dev/net/tun"),
        "pid 1 holds the TAP: {links:?}"
    );
    drop(teardown);
}

/// Where this user cannot open `/dev/net/tun` (a rootless user where the device is 0600 root),
/// a gateway box is refused naming the device and the fix, before anything is made: never a
/// box with another network. Where it can, the box runs with its TAP. Either way it asserts.
#[test]
fn a_gateway_box_runs_exactly_where_the_device_is_openable_and_is_refused_clearly_elsewhere() {
    let rt = Runtime::new().expect("runtime");
    let openable = hull_box::tap::probe().is_ok();
    let mut handed = false;
    let got = run_taking(&rt, &python("print('RAN')"), &mut |_tap: Tap| {
        handed = true;
        Ok(())
    });
    if openable {
        let r = got.expect("box runs");
        assert!(r.success && r.stdout.contains("RAN") && handed, "{r:?}");
    } else {
        let e = got.expect_err("refused");
        assert!(matches!(e, BoxError::TunUnavailable { .. }), "{e:?}");
        assert!(e.to_string().contains("chmod 0666 /dev/net/tun"), "{e}");
        assert!(!handed);
    }
}

/// A gateway box may not keep a capability over its link (not even through `ALL`): it would
/// reconfigure the TAP or open raw sockets on it.
#[test]
fn a_gateway_box_keeping_net_admin_or_net_raw_is_refused() {
    let rt = Runtime::new().expect("runtime");
    for caps in [&["NET_ADMIN"][..], &["NET_RAW"], &["ALL"]] {
        let mut spec = python("print(1)");
        spec.cap_add = caps.iter().map(|c| c.to_string()).collect();
        let e = run_taking(&rt, &spec, &mut |_tap: Tap| Ok(())).expect_err("refused");
        assert_eq!(
            e.field(),
            Some(hull_box::SpecField::CapAdd),
            "{caps:?}: {e:?}"
        );
        assert!(e.to_string().contains("NET_RAW"), "{e}");
    }
    // Dropping them from ALL is fine.
    let mut spec = python("print('RAN')");
    spec.cap_add = vec!["ALL".into()];
    spec.cap_drop = vec!["NET_ADMIN".into(), "NET_RAW".into()];
    let r = run_taking(&rt, &spec, &mut |_tap: Tap| Ok(())).expect("runs");
    assert!(r.stdout.contains("RAN"), "{r:?}");
}

/// A resident box (a named sandbox's) gets its TAP the same way: the handler runs before the
/// box is reported ready, and the programs it starts later see the configured link.
#[test]
fn a_resident_gateway_box_hands_its_tap_over_before_it_is_ready() {
    let rt = Runtime::new().expect("runtime");
    let mut spec = BoxSpec::new(vec!["true".into()]);
    spec.network = Network::Gateway;
    let mut taps = Vec::new();
    let resident = rt
        .start_resident_with(
            &spec,
            Handoff {
                fuse: None,
                tap: Some(&mut |tap: Tap| {
                    taps.push(tap);
                    Ok(())
                }),
            },
        )
        .expect("resident box starts");
    assert_eq!(taps.len(), 1);
    assert_eq!(taps[0].pid, resident.pid());
    let dir = tempfile::tempdir().expect("dir");
    let out_path = dir.path().join("out");
    let out = std::fs::File::create(&out_path).expect("out");
    let null = std::fs::File::open("/dev/null").expect("null");
    let argv: Vec<String> = ["python3", "-c", SHOW_LINK]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
    resident
        .send(
            &hull_box::ResidentProgram {
                argv: &argv,
                env: &env,
                cwd: "/",
                ids: None,
            },
            [null.as_fd(), out.as_fd(), out.as_fd()],
        )
        .expect("send");
    let end = Instant::now() + Duration::from_secs(20);
    let mut status = None;
    while status.is_none() && Instant::now() < end {
        let mut fds = [libc::pollfd {
            fd: resident.channel_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one pollfd that lives for the call.
        if unsafe { libc::poll(fds.as_mut_ptr(), 1, 200) } <= 0 {
            continue;
        }
        match resident.recv().expect("event") {
            hull_box::ResidentEvent::Exited { status: s, .. } => status = Some(s),
            hull_box::ResidentEvent::Closed => break,
            _ => {}
        }
    }
    let shown = std::fs::read_to_string(&out_path).unwrap_or_default();
    assert_eq!(status, Some(0), "{shown}");
    assert!(shown.contains("ADDR 10.0.2.100\n"), "{shown}");
    assert!(
        shown.contains("ROUTE eth0 0.0.0.0 10.0.2.2 0003\n"),
        "{shown}"
    );
    drop(resident);
}

/// In a long-lived Runtime (every warm pool on) a gateway box enters its template with a
/// network namespace and TAP the pool made ahead (owned by the template's user namespace, so
/// the box has no capability over it at all); the first, before the pool has one, is built
/// whole. Both kinds have the same link, hand over a TAP that is theirs, and keep the same
/// boundary; and the pool never hands a gateway box a loopback-only namespace.
#[test]
fn a_templated_gateway_box_enters_a_pooled_namespace_with_its_tap_and_keeps_every_property() {
    let rt = Runtime::with_warm(hull_box::WarmOptions::ALL).expect("runtime");
    let code = format!(
        "{SHOW_LINK}\n{TRY_ESCAPE}\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('10.0.2.2', 9))"
    );
    let spec = python(&code);
    let mut pooled_runs = 0;
    let mut fresh_runs = 0;
    for _ in 0..40 {
        let before = rt.warm_stats().pooled_nets;
        let (tx, rx) = mpsc::channel();
        let (r, teardown) = rt
            .run_detached_with(
                &spec,
                RunOptions { capture: true },
                &mut NoSink,
                None,
                Handoff {
                    fuse: None,
                    tap: Some(&mut |tap: Tap| {
                        let tx = tx.clone();
                        std::thread::spawn(move || {
                            let _ = tx.send(arp_for_gateway(&tap.fd, Duration::from_secs(10)));
                        });
                        Ok(())
                    }),
                },
            )
            .expect("box runs");
        let frame = rx.recv_timeout(Duration::from_secs(15)).expect("reader");
        drop(teardown);
        let out = &r.stdout;
        assert!(r.success, "{r:?}");
        for want in [
            "IFS ['eth0', 'lo']",
            "ADDR 10.0.2.100\n",
            "MASK 255.255.255.0\n",
            "MTU 65520\n",
            "MAC 02:48:55:4c:4c:01\n",
            "ROUTE eth0 0.0.0.0 10.0.2.2 0003\n",
            "RESOLV nameserver 10.0.2.2\n",
            "DOWN EPERM\n",
            "ADDR EPERM\n",
            "MTU EPERM\n",
            "RAW EPERM\n",
            "PACKET EAFNOSUPPORT\n",
            "TUN ENOENT\n",
            "TUNFDS 0 ",
            "CAPEFF 0000000000000000\n",
        ] {
            assert!(out.contains(want), "{want:?} missing: {out}");
        }
        assert!(frame.is_some(), "no ARP request from the box on its TAP");
        if rt.warm_stats().pooled_nets > before {
            pooled_runs += 1;
            if pooled_runs >= 2 {
                break;
            }
        } else {
            fresh_runs += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(fresh_runs >= 1, "the first gateway box is built whole");
    assert_eq!(pooled_runs, 2, "no gateway box entered a pooled TAP");
    assert_eq!(rt.warm_stats().templates, 1);
}
