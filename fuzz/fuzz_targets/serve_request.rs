//! `hull serve`'s request lines (`hull_cli::serve::parse_request`), then what a `run` or a
//! `sandbox.create` does with its params before any box starts: the box spec (`run_spec`,
//! `BoxSpec::validate`) and the sandbox request (`SandboxRequest::from_json`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // An `image` param opens the image store: keep it in a private directory.
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| tempfile::tempdir().expect("temp dir"));
    std::env::set_var("HULL_HOME", home.path());
    let req = match hull_cli::serve::parse_request(data) {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(answer) => {
            assert_eq!(answer["error"]["kind"], "protocol", "{answer}");
            return;
        }
    };
    match req.method.as_str() {
        "run" => {
            if let Ok((_req, built, _stream)) = hull_cli::serve::run_spec(req.params) {
                let _ = built.spec.validate();
            }
        }
        "sandbox.create" => {
            if let Ok(cfg) = hull_api::SandboxRequest::from_json(&req.params) {
                // Sizes that parse are sizes the box can be given as asked: a tmpfs of zero
                // bytes would be mounted without any limit, and MiB past 2^44 do not fit in
                // bytes.
                for t in &cfg.tmpfs {
                    assert!(t.size > 0, "tmpfs {} of 0 bytes accepted", t.target);
                }
                assert!(cfg.timeout.as_millis() >= 1, "timeout {:?}", cfg.timeout);
                assert!(cfg.setup_timeout.as_millis() >= 1);
                if let Some(m) = cfg.memory {
                    assert!(m >= 16 << 20, "memory {m} accepted");
                }
            }
        }
        _ => {}
    }
});
