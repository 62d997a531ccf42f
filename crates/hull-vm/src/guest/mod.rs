//! hull as the guest's init (PID 1 of the VM): loads the kernel modules the initramfs carries,
//! builds the program's root (the image shared read-only over virtio-fs under a tmpfs upper,
//! `/workspace` over virtio-fs), finds the agent port and answers the host's requests there
//! until told to power off. Anything that fails before the port is open is printed on the
//! console (which the host reads back) and powers the guest off.

mod exec;
mod failed;
mod setup;

use failed::{at, Failed};

use std::io::{BufRead, BufReader, Read, Write};

use crate::proto::{self, Ask, Tell};

/// Sets up the guest's links (loopback, and with `true` the gateway network's device): the
/// namespace tier's own link setup, given by the binary that links both (hull-vm depends on
/// no hull crate).
pub type Links = fn(bool) -> std::io::Result<()>;

/// Runs the guest's init; never returns (the guest powers off).
pub fn main(links: Links) -> ! {
    let code = match serve(links) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hull-init: {e}");
            1
        }
    };
    let _ = std::io::stderr().flush();
    setup::power_off(code)
}

/// The next request on the agent port; `None` when the host closed it.
fn next_ask(
    reader: &mut BufReader<std::fs::File>,
    line: &mut Vec<u8>,
) -> Result<Option<Result<Ask, serde_json::Error>>, Failed> {
    line.clear();
    let n = reader
        .take(proto::MAX_LINE as u64)
        .read_until(b'\n', line)
        .map_err(at("reading the agent port"))?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some(serde_json::from_slice::<Ask>(line)))
}

fn closed() -> Failed {
    Failed {
        step: "reading the agent port".into(),
        error: "the host closed it".into(),
    }
}

fn serve(links: Links) -> Result<(), Failed> {
    setup::early_mounts()?;
    setup::load_modules()?;
    let port_path = setup::agent_port()?;
    let port = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&port_path)
        .map_err(at("opening the agent port"))?;
    let writer = exec::Writer::new(port.try_clone().map_err(at("opening the agent port"))?);
    let mut reader = BufReader::new(port);
    let mut line = Vec::new();
    // From here a failure is told to the host as well.
    let tell = |f: Failed| {
        writer.send(&Tell::Failed {
            step: f.step.clone(),
            error: f.error.clone(),
        });
        f
    };
    let boot = match next_ask(&mut reader, &mut line)? {
        Some(Ok(Ask::Boot(b))) => b,
        Some(_) => {
            return Err(tell(Failed {
                step: "reading the boot request".into(),
                error: "the host's first request was not `boot`".into(),
            }))
        }
        None => return Err(closed()),
    };
    let cgroup = setup::program_cgroup()
        .and_then(|cg| setup::program_root(&boot).map(|()| cg))
        .and_then(|cg| {
            links(boot.net.is_some()).map_err(at("setting up the network"))?;
            match &boot.net {
                Some(net) => setup::resolv_conf(&net.resolv_conf).map(|()| cg),
                None => Ok(cg),
            }
        })
        .map_err(tell)?;
    writer.send(&Tell::Ready {
        kernel: rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned(),
    });
    // From here the port is read on a thread of its own, so the running program's input
    // reaches it while init waits for the program.
    let (tx, rx) = std::sync::mpsc::channel();
    let router = writer.clone();
    std::thread::spawn(move || route(reader, &tx, &router));
    loop {
        match rx.recv().map_err(|_| closed())?? {
            Routed::Exec(e, input) => writer.send(&exec::run(&e, input, &writer, &cgroup)),
            Routed::PowerOff => return Ok(()),
        }
    }
}

/// What the port's reader hands init: a program to run (with its input pipe's read end when
/// its input follows), or the end.
enum Routed {
    Exec(proto::Exec, Option<std::os::fd::OwnedFd>),
    PowerOff,
}

/// Reads the port until it closes: a program's input goes straight into its pipe (made here,
/// when the `exec` arrives, so no frame that follows it can come too early), every other
/// request to init. A request that is not of the protocol is answered as failed.
fn route(
    mut reader: BufReader<std::fs::File>,
    tx: &std::sync::mpsc::Sender<Result<Routed, Failed>>,
    writer: &exec::Writer,
) {
    use base64::Engine as _;
    let mut line = Vec::new();
    // The running program's input pipe (its write end); `None` once closed or refused.
    let mut input: Option<std::fs::File> = None;
    loop {
        let ask = match next_ask(&mut reader, &mut line) {
            Err(f) => {
                let _ = tx.send(Err(f));
                return;
            }
            Ok(None) => {
                let _ = tx.send(Err(closed()));
                return;
            }
            Ok(Some(ask)) => ask,
        };
        let routed = match ask {
            Ok(Ask::Stdin { b64 }) => {
                let bytes = base64::engine::general_purpose::STANDARD.decode(b64);
                // A program that stopped reading, or ended, closes its side: the rest is dropped.
                if let (Some(pipe), Ok(bytes)) = (&mut input, bytes) {
                    if pipe.write_all(&bytes).is_err() {
                        input = None;
                    }
                }
                continue;
            }
            Ok(Ask::StdinEnd) => {
                input = None;
                continue;
            }
            Ok(Ask::Exec(e)) => {
                input = None;
                let read = if e.stdin {
                    match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
                        Ok((r, w)) => {
                            input = Some(std::fs::File::from(w));
                            Some(r)
                        }
                        Err(err) => {
                            let _ = tx.send(Err(at("making the program's input pipe")(err)));
                            return;
                        }
                    }
                } else {
                    None
                };
                Routed::Exec(e, read)
            }
            Ok(Ask::PowerOff) => Routed::PowerOff,
            Ok(Ask::Boot(_)) => {
                writer.send(&Tell::Failed {
                    step: "reading a request".into(),
                    error: "the guest has booted already".into(),
                });
                continue;
            }
            Err(e) => {
                writer.send(&Tell::Failed {
                    step: "reading a request".into(),
                    error: e.to_string(),
                });
                continue;
            }
        };
        if tx.send(Ok(routed)).is_err() {
            return;
        }
    }
}
