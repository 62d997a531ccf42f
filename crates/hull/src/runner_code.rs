//! The cell runner as a compiled code object, so a box's interpreter need not compile the
//! runner's source (14 KB: 2.4-4.5 ms) at every start. Compiled once per process, on a helper
//! thread, by the host's `/usr/bin/python3` (isolated mode, no site): the `host` image's
//! interpreter. A box whose interpreter has another bytecode version (its magic number differs)
//! compiles the source instead, so any image works; until the code object is ready, boxes get
//! the source as before.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The runner's source, passed to `python3 -c` (or compiled, below).
pub const RUNNER: &str = include_str!("runner.py");

/// The interpreter that compiles: the one the `host` image's boxes run.
const HOST_PYTHON: &str = "/usr/bin/python3";

/// Reads the runner's source on stdin and writes the interpreter's magic number followed by the
/// marshalled code object (compiled as `-c` would, file name `<string>`).
const COMPILE: &str = "import sys, marshal\nfrom importlib.util import MAGIC_NUMBER\nsrc = sys.stdin.buffer.read().decode()\nsys.stdout.buffer.write(MAGIC_NUMBER + marshal.dumps(compile(src, '<string>', 'exec')))";

/// What a box runs as `python3 -S -c BOOTSTRAP MODE SOCKET` when the code object is in its
/// private directory: `r` holds the magic number and code object, `runner.py` the source. Only
/// builtin modules are used, so nothing on sys.path (the writable /workspace) runs first.
pub const BOOTSTRAP: &str = "import marshal as _m\nwith open('/run/hull/r', 'rb') as _f:\n    _d = _f.read()\nif _d[:4] == __import__('sys').modules['_frozen_importlib_external'].MAGIC_NUMBER:\n    _c = _m.loads(_d[4:])\nelse:\n    with open('/run/hull/runner.py') as _f:\n        _c = compile(_f.read(), '<string>', 'exec')\ndel _m, _f, _d\nexec(_c)";

static CODE: OnceLock<Option<Vec<u8>>> = OnceLock::new();

/// The compiled runner (magic number and code object) once it is ready; starts compiling it on
/// a helper thread at the first call. `None`: not yet, or the host has no usable python.
pub fn compiled() -> Option<&'static [u8]> {
    static STARTED: OnceLock<()> = OnceLock::new();
    if let Some(code) = CODE.get() {
        return code.as_deref();
    }
    STARTED.get_or_init(|| {
        let _ = std::thread::Builder::new()
            .name("hull-runner-code".into())
            .spawn(|| {
                let _ = CODE.set(compile());
            });
    });
    None
}

/// Runs the host's interpreter once to compile the runner; `None` if that fails in any way.
fn compile() -> Option<Vec<u8>> {
    let mut child = Command::new(HOST_PYTHON)
        .args(["-I", "-S", "-c", COMPILE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let wrote = stdin.write_all(RUNNER.as_bytes());
    drop(stdin);
    let mut out = Vec::new();
    let read = child.stdout.take()?.read_to_end(&mut out);
    let status = child.wait().ok()?;
    (wrote.is_ok() && read.is_ok() && status.success() && out.len() > 4).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_python_compiles_the_runner_with_its_magic_number() {
        if !std::path::Path::new(HOST_PYTHON).exists() {
            eprintln!("skipped: no {HOST_PYTHON}");
            return;
        }
        let code = compile().expect("the host's python compiles the runner");
        let magic = Command::new(HOST_PYTHON)
            .args(["-I", "-S", "-c", "import sys\nfrom importlib.util import MAGIC_NUMBER as m\nsys.stdout.buffer.write(m)"])
            .output()
            .unwrap()
            .stdout;
        assert_eq!(&code[..4], &magic[..]);
    }
}
