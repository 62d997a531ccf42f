//! `hull bench --network`: what the gateway network costs a box, beside the host's own network
//! and slirp4netns (when installed and hull runs as root), interleaved round by round. Each
//! round runs one box per side with the same Python client against the same server on this
//! host: connect latency, request round trips of one byte on an open connection, and the
//! throughput of a bulk upload; plus the start of a box with the gateway network beside one
//! with none. Nothing leaves the host: the server listens on the host's own addresses, the
//! gateway dials the host's own (non-loopback) address, slirp4netns maps 10.0.2.2 to loopback.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::time::Instant;

use hull_box::{BoxSpec, Handoff, Network, NoSink, RunOptions, Runtime, Tap};
use serde_json::{json, Value};

use crate::bench_stats::quantile;
use crate::net::spawn::GatewayProcess;
use crate::net::wire::{PolicySpec, Start};

/// Bytes of the bulk upload.
const BULK: usize = 64 << 20;
/// Round trips timed per box.
const TRIPS: usize = 400;

/// The client each box runs: `HOST PORT` in argv; prints `connect_us rtt_us... upload_s`.
const CLIENT: &str = r#"
import socket, sys, time, os
host, port = sys.argv[1], int(sys.argv[2])
if host == 'wait-tap0':
    while 'tap0:' not in open('/proc/net/dev').read(): time.sleep(0.001)
    time.sleep(0.05)
    host = '10.0.2.2'
t = time.perf_counter(); s = socket.create_connection((host, port), timeout=20); c = time.perf_counter() - t
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(b'p'); s.recv(1)
rtt = []
for i in range(TRIPS):
    t = time.perf_counter(); s.sendall(b'x'); s.recv(1); rtt.append(time.perf_counter() - t)
s.close()
u = socket.create_connection((host, port), timeout=20)
buf = b'\0' * (256 << 10); left = BULK
t = time.perf_counter()
u.sendall(b't')
while left > 0:
    n = min(left, len(buf)); u.sendall(buf[:n]); left -= n
u.shutdown(socket.SHUT_WR); u.recv(8)
up = time.perf_counter() - t
print(int(c * 1e6), ' '.join(str(int(r * 1e6)) for r in rtt), up)
"#;

/// The server: a first byte `p` echoes every byte (round trips), `t` counts what comes until
/// the end and answers the count (upload).
fn serve(l: TcpListener) {
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let _ = c.set_nodelay(true);
                let mut first = [0u8; 1];
                if c.read_exact(&mut first).is_err() {
                    return;
                }
                let mut buf = vec![0u8; 1 << 20];
                if first[0] == b'p' {
                    let _ = c.write_all(b"p");
                    while let Ok(n) = c.read(&mut buf[..1]) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                } else {
                    let mut total: u64 = 0;
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        total += n as u64;
                    }
                    let _ = c.write_all(&total.to_le_bytes());
                }
            });
        }
    });
}

/// An address of this host's own that is not loopback (what the gateway dials).
fn host_address() -> Option<IpAddr> {
    crate::sys::host_addrs()
        .ok()?
        .into_iter()
        .find(|a| matches!(a, IpAddr::V4(v) if !v.is_loopback() && !v.is_link_local()))
}

/// One side's figures from one box.
struct Figures {
    connect_us: f64,
    rtt_us: Vec<f64>,
    upload_s: f64,
}

fn parse(out: &str) -> Result<Figures, String> {
    let mut it = out.split_whitespace();
    let num = |s: Option<&str>| -> Result<f64, String> {
        s.and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("the client printed {out:?}"))
    };
    let connect_us = num(it.next())?;
    let rest: Vec<&str> = it.collect();
    let (last, trips) = rest
        .split_last()
        .ok_or_else(|| format!("the client printed {out:?}"))?;
    Ok(Figures {
        connect_us,
        rtt_us: trips
            .iter()
            .map(|t| num(Some(t)))
            .collect::<Result<_, _>>()?,
        upload_s: num(Some(last))?,
    })
}

fn client_spec(python: &str, host: &str, port: u16, network: Network) -> BoxSpec {
    let code = CLIENT
        .replace("TRIPS", &TRIPS.to_string())
        .replace("BULK", &BULK.to_string());
    let mut spec = BoxSpec::new(vec![
        python.into(),
        "-c".into(),
        code,
        host.into(),
        port.to_string(),
    ]);
    spec.network = network;
    spec.timeout = std::time::Duration::from_secs(120);
    spec
}

/// Runs `spec` handing its TAP to `take`; the client's figures.
fn run(
    rt: &Runtime,
    spec: &BoxSpec,
    take: Option<&mut dyn FnMut(Tap) -> std::io::Result<()>>,
) -> Result<Figures, String> {
    let handoff = Handoff {
        fuse: None,
        tap: take,
    };
    let r = rt
        .run_with(spec, RunOptions { capture: true }, &mut NoSink, handoff)
        .map_err(|e| hull_api::Chain(&e).to_string())?;
    if !r.success {
        return Err(format!(
            "the client failed ({:?}, {:?}): {}{}",
            r.exit_code, r.fault, r.stdout, r.stderr
        ));
    }
    parse(&r.stdout)
}

/// The gateway side: a gateway that allows the host's address (an allowed CIDR: it is in an
/// always-denied class otherwise).
fn gateway_start(host: IpAddr) -> Start {
    Start {
        policy: PolicySpec {
            mode: "allow-all".into(),
            allow_cidrs: vec![format!("{host}/32")],
            ..PolicySpec::default()
        },
        ports: Vec::new(),
        max_tcp_connections: 1024,
        mtu: hull_box::tap::MTU as usize,
        dns: Vec::new(),
        broker: None,
        ca_dir: None,
        upstream_pems: Vec::new(),
        ca_files: Default::default(),
        proxy: None,
    }
}

/// Attaches slirp4netns to the box whose pid 1 is `pid` (its network namespace), and waits
/// until it is ready; the TAP hull made is closed (the box talks through slirp's `tap0`).
fn slirp(tap: Tap) -> std::io::Result<std::process::Child> {
    drop(tap.fd);
    let (ready_r, ready_w) = rustix::pipe::pipe()?;
    let ready_w: OwnedFd = ready_w;
    let mut cmd = Command::new("slirp4netns");
    crate::sys::give_fd(&mut cmd, std::os::fd::AsRawFd::as_raw_fd(&ready_w), 5);
    cmd.args(["--configure", "--mtu=65520", "--ready-fd=5"])
        .arg(tap.pid.to_string())
        .arg("tap0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = cmd.spawn()?;
    drop(ready_w);
    let mut b = [0u8; 1];
    std::fs::File::from(ready_r).read_exact(&mut b)?;
    Ok(child)
}

fn summary(name: &str, figs: &[Figures]) -> Value {
    let mut connect: Vec<f64> = figs.iter().map(|f| f.connect_us).collect();
    let mut rtt: Vec<f64> = figs.iter().flat_map(|f| f.rtt_us.iter().copied()).collect();
    let mut mbps: Vec<f64> = figs
        .iter()
        .map(|f| BULK as f64 / f.upload_s / 1e6)
        .collect();
    json!({
        "side": name,
        "connect_us": {"p50": quantile(&mut connect, 0.5), "p90": quantile(&mut connect, 0.9)},
        "rtt_us": {"p50": quantile(&mut rtt, 0.5), "p90": quantile(&mut rtt, 0.9)},
        "upload_mb_s": {"p50": quantile(&mut mbps, 0.5), "p10": quantile(&mut mbps, 0.1)},
    })
}

/// `hull bench --network`.
pub fn main(runs: usize, json_out: bool) -> i32 {
    match measure(runs) {
        Ok(v) => {
            if json_out {
                println!("{v}");
            } else {
                print_table(&v);
            }
            0
        }
        Err(e) => {
            eprintln!("hull bench --network: {e}");
            1
        }
    }
}

fn measure(runs: usize) -> Result<Value, String> {
    let host = host_address()
        .ok_or("this host has no non-loopback IPv4 address for the gateway to dial")?;
    let rt = Runtime::new().map_err(|e| hull_api::Chain(&e).to_string())?;
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let l = TcpListener::bind(SocketAddr::new(host, 0)).map_err(|e| format!("bind {host}: {e}"))?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    serve(l);
    // slirp4netns maps 10.0.2.2 to the host's loopback: a listener there on the same port.
    let slirp_ok = rustix::process::geteuid().is_root()
        && Command::new("slirp4netns")
            .arg("--version")
            .output()
            .is_ok()
        && TcpListener::bind(("127.0.0.1", port)).map(serve).is_ok();
    let why_no_slirp = if slirp_ok {
        None
    } else if !rustix::process::geteuid().is_root() {
        Some("slirp4netns is measured as root only")
    } else {
        Some("slirp4netns is not installed (apt-get install slirp4netns), or 127.0.0.1 of the port is taken")
    };
    let host_s = host.to_string();
    let (mut on_host, mut on_gateway, mut on_slirp) = (Vec::new(), Vec::new(), Vec::new());
    let (mut start_none, mut start_gateway) = (Vec::new(), Vec::new());
    for round in 0..runs.max(1) + 1 {
        let keep = round > 0; // the first round warms up
        let h = run(
            &rt,
            &client_spec(python, &host_s, port, Network::Host),
            None,
        )?;
        let mut gw = None;
        let start = gateway_start(host);
        let mut take = |tap: Tap| {
            gw = Some(
                GatewayProcess::start(tap.fd, &start, None)
                    .map_err(|e| std::io::Error::other(hull_api::Chain(&e).to_string()))?,
            );
            Ok(())
        };
        let g = run(
            &rt,
            &client_spec(python, &host_s, port, Network::Gateway),
            Some(&mut take),
        )
        .map_err(|e| format!("hull gateway: {e}"))?;
        drop(gw);
        let s = if slirp_ok {
            let mut child = None;
            let mut take = |tap: Tap| {
                child = Some(slirp(tap)?);
                Ok(())
            };
            let s = run(
                &rt,
                &client_spec(python, "wait-tap0", port, Network::Gateway),
                Some(&mut take),
            );
            // Ended whether the box succeeded or not (it outlives its namespace otherwise).
            if let Some(mut c) = child {
                let _ = c.kill();
                let _ = c.wait();
            }
            Some(s.map_err(|e| format!("slirp4netns: {e}"))?)
        } else {
            None
        };
        // Box start: `true` with no network, and with the gateway (TAP made, gateway started).
        let t = Instant::now();
        let mut spec = BoxSpec::new(vec!["/bin/true".into()]);
        rt.run(&spec, RunOptions { capture: true }, &mut NoSink)
            .map_err(|e| hull_api::Chain(&e).to_string())?;
        let none_ms = t.elapsed().as_secs_f64() * 1e3;
        spec.network = Network::Gateway;
        let t = Instant::now();
        let mut gw = None;
        let mut take = |tap: Tap| {
            gw = Some(
                GatewayProcess::start(tap.fd, &start, None)
                    .map_err(|e| std::io::Error::other(hull_api::Chain(&e).to_string()))?,
            );
            Ok(())
        };
        rt.run_with(
            &spec,
            RunOptions { capture: true },
            &mut NoSink,
            Handoff {
                fuse: None,
                tap: Some(&mut take),
            },
        )
        .map_err(|e| hull_api::Chain(&e).to_string())?;
        let gw_ms = t.elapsed().as_secs_f64() * 1e3;
        drop(gw);
        if keep {
            on_host.push(h);
            on_gateway.push(g);
            if let Some(s) = s {
                on_slirp.push(s);
            }
            start_none.push(none_ms);
            start_gateway.push(gw_ms);
        }
    }
    let mut sides = vec![
        summary("host network", &on_host),
        summary("hull gateway", &on_gateway),
    ];
    if on_slirp.is_empty() {
        sides.push(json!({"side": "slirp4netns", "skipped": why_no_slirp}));
    } else {
        sides.push(summary("slirp4netns", &on_slirp));
    }
    Ok(json!({
        "runs": runs,
        "load_average": crate::bench_report::load_average(),
        "sides": sides,
        "box_start_ms": {
            "no network": {"p50": quantile(&mut start_none, 0.5), "p90": quantile(&mut start_none, 0.9)},
            "gateway network": {"p50": quantile(&mut start_gateway, 0.5), "p90": quantile(&mut start_gateway, 0.9)},
        },
    }))
}

fn print_table(v: &Value) {
    println!(
        "{:<14} {:>12} {:>12} {:>10} {:>10} {:>12}",
        "side", "connect p50", "connect p90", "rtt p50", "rtt p90", "upload MB/s"
    );
    for s in v["sides"].as_array().into_iter().flatten() {
        if let Some(why) = s["skipped"].as_str() {
            println!("{:<14} skipped: {why}", s["side"].as_str().unwrap_or(""));
            continue;
        }
        println!(
            "{:<14} {:>10.0}us {:>10.0}us {:>8.0}us {:>8.0}us {:>12.0}",
            s["side"].as_str().unwrap_or(""),
            s["connect_us"]["p50"].as_f64().unwrap_or(0.0),
            s["connect_us"]["p90"].as_f64().unwrap_or(0.0),
            s["rtt_us"]["p50"].as_f64().unwrap_or(0.0),
            s["rtt_us"]["p90"].as_f64().unwrap_or(0.0),
            s["upload_mb_s"]["p50"].as_f64().unwrap_or(0.0),
        );
    }
    let b = &v["box_start_ms"];
    println!(
        "box start (true): no network {:.2} ms p50 / {:.2} p90; gateway network {:.2} ms p50 / {:.2} p90",
        b["no network"]["p50"].as_f64().unwrap_or(0.0),
        b["no network"]["p90"].as_f64().unwrap_or(0.0),
        b["gateway network"]["p50"].as_f64().unwrap_or(0.0),
        b["gateway network"]["p90"].as_f64().unwrap_or(0.0),
    );
    println!("load average {}", v["load_average"]);
}
