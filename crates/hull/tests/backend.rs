//! The Sandbox layer runs every box through its `Backend`: a backend that only records what it
//! is asked (no box, no namespace) sees the Sandbox's checks, probe, calls and destructions, and
//! its refusals reach the caller named by the Sandbox's argument.

use std::path::Path;
use std::sync::{Arc, Mutex};

use hull::backend::{Backend, Destroy};
use hull::files::Confined;
use hull::{Sandbox, SandboxError, SandboxRequest};
use hull_box::spec::SpecError;
use hull_box::{BoxError, BoxSpec, NoSink, OutputSink, RunResult, SpecField, Stats, Stream};

#[derive(Default)]
struct Seen {
    checked: Vec<BoxSpec>,
    ran: Vec<BoxSpec>,
    destroyed: usize,
}

/// Runs nothing: each "box" prints its argv and exits 0. `refuse` makes `check` refuse the
/// memory cap.
struct Recorder {
    seen: Arc<Mutex<Seen>>,
    refuse: bool,
}

impl Backend for Recorder {
    fn check(&self, spec: &BoxSpec) -> Result<(), BoxError> {
        self.seen.lock().unwrap().checked.push(spec.clone());
        if self.refuse {
            return Err(BoxError::Spec(SpecError::Invalid {
                field: SpecField::Memory,
                why: "this backend has no memory for it".into(),
            }));
        }
        Ok(())
    }

    /// A gateway box is refused as the engine refuses one without a link to hand out: this
    /// backend has none.
    fn run_served(
        &self,
        _spec: &BoxSpec,
        _sink: &mut dyn OutputSink,
        _tap: &mut hull_box::TapHandler<'_>,
    ) -> Result<(RunResult, Destroy), BoxError> {
        Err(BoxError::NoTapHandler)
    }

    fn run(
        &self,
        spec: &BoxSpec,
        sink: &mut dyn OutputSink,
    ) -> Result<(RunResult, Destroy), BoxError> {
        self.seen.lock().unwrap().ran.push(spec.clone());
        let out = format!("{}\n", spec.argv.join(" "));
        sink.chunk(Stream::Stdout, out.as_bytes());
        let result = RunResult {
            stdout: out,
            stderr: String::new(),
            exit_code: 0,
            success: true,
            fault: None,
            truncated: false,
            duration_ms: 0,
            stats: Stats::default(),
            warnings: Vec::new(),
            dropped_bytes: 0,
            stdout_b64: None,
            stderr_b64: None,
        };
        let seen = Arc::clone(&self.seen);
        Ok((
            result,
            Box::new(move || seen.lock().unwrap().destroyed += 1),
        ))
    }

    fn files(&self, workspace: &Path) -> Result<Confined, SandboxError> {
        Confined::open(workspace)
    }
}

#[test]
fn a_sandbox_makes_checks_runs_and_destroys_its_boxes_through_its_backend() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let backend = Arc::new(Recorder {
        seen: Arc::clone(&seen),
        refuse: false,
    });
    let req = SandboxRequest {
        memory: Some(64 << 20),
        ..SandboxRequest::default()
    };
    let sb = Sandbox::create(backend, "t".into(), req).unwrap();
    let r = sb
        .run(vec!["echo".into(), "hi".into()], Box::new(NoSink))
        .unwrap();
    assert_eq!(r.run.stdout, "echo hi\n");
    std::fs::write(sb.workspace_path().join("f"), "x").unwrap();
    assert_eq!(sb.files().read_file("f", 10).unwrap().0, b"x");
    drop(sb);
    let s = seen.lock().unwrap();
    assert_eq!(s.checked.len(), 1);
    assert_eq!(s.checked[0].memory, Some(64 << 20));
    let argvs: Vec<Vec<String>> = s.ran.iter().map(|b| b.argv.clone()).collect();
    assert_eq!(
        argvs,
        [
            vec!["/bin/true".to_string()],
            vec!["echo".into(), "hi".into()]
        ]
    );
    assert!(s.ran.iter().all(|b| b.workspace == s.checked[0].workspace));
    assert_eq!(
        s.destroyed,
        s.ran.len(),
        "every box the backend made was destroyed"
    );
}

#[test]
fn a_backends_refusal_is_named_by_the_sandbox_argument() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let backend = Arc::new(Recorder {
        seen: Arc::clone(&seen),
        refuse: true,
    });
    let e = Sandbox::create(backend, "t".into(), SandboxRequest::default())
        .expect_err("the backend refused");
    assert_eq!((e.kind(), e.arg()), ("invalid_argument", Some("memory_mb")));
    assert_eq!(
        e.to_string(),
        "memory_mb: this backend has no memory for it"
    );
    assert!(
        seen.lock().unwrap().ran.is_empty(),
        "nothing ran after the refusal"
    );
}
