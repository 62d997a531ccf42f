//! Prewarmed runner boxes (`prewarm=N`), kept by the Sandbox's pool on hull-box's warm-pool
//! mechanism: N boxes wait, each call takes one and its replacement follows, the pool never
//! holds more than N, and destroying the Sandbox ends the ones waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hull::backend::Backend;
use hull::{Language, PrewarmStats, Sandbox, SandboxRequest};
use hull_box::{NoSink, Runtime};
use hull_testkit::skip;

/// Polls `f` until it holds or `timeout` passes; whether it held.
fn until(timeout: Duration, f: impl Fn() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

#[test]
fn prewarmed_boxes_are_kept_taken_once_per_call_and_replaced() {
    if !std::path::Path::new("/usr/bin/python3").exists() {
        skip("the runner needs /usr/bin/python3 on the host");
        return;
    }
    let rt = match Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            skip(format!("no box runtime here: {e}"));
            return;
        }
    };
    let backend: Arc<dyn Backend> = Arc::new(rt);
    let req = SandboxRequest {
        prewarm: 2,
        ..SandboxRequest::default()
    };
    let sb = Sandbox::create(backend, "prewarm".into(), req).expect("sandbox");
    let wait = Duration::from_secs(60);
    assert!(
        until(wait, || sb.warm_stats().ready == 2),
        "{:?}",
        sb.warm_stats()
    );
    for call in 1..=3 {
        let r = sb
            .run_code("print('warm')", Language::Python, Box::new(NoSink))
            .expect("call");
        assert_eq!(r.run.stdout, "warm\n", "{:?}", r.run);
        assert_eq!(sb.warm_stats().used, call);
        assert!(
            until(wait, || sb.warm_stats().ready == 2),
            "the box taken is replaced: {:?}",
            sb.warm_stats()
        );
    }
    // One replacement per box taken: the pool does not grow past prewarm.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(sb.warm_stats().ready, 2);
    // A kernel box is started ahead too, after the call boxes: kernel() takes it (its
    // interpreter already running) and it is replaced.
    assert!(
        until(wait, || sb.warm_stats().kernels_ready == 1),
        "{:?}",
        sb.warm_stats()
    );
    let k = sb.kernel().expect("kernel");
    assert_eq!(sb.warm_stats().kernels_ready, 0);
    let r = sb
        .kernel_run(&k, "import os\nx = 20\nx * 2", &mut NoSink)
        .expect("cell");
    assert_eq!(r.results[0]["text/plain"], "40", "{:?}", r.run);
    assert!(
        until(wait, || sb.warm_stats().kernels_ready == 1),
        "the kernel box taken is replaced: {:?}",
        sb.warm_stats()
    );
    sb.destroy();
    assert_eq!(
        sb.warm_stats(),
        PrewarmStats {
            ready: 0,
            used: 3,
            kernels_ready: 0
        }
    );
}
