//! VMs booted ahead for a Sandbox session's calls (`prewarm` with isolation vm): a guest takes
//! seconds to boot where KVM cannot run it, and a session's calls differ only in their program
//! (argv, environment, input, deadline), which the guest is given after it booted. So the
//! pool keeps guests booted for one shape of run ([`hull_vm::VmRun`] but its program) and a
//! call of that shape takes one; the next is booted after the call, on a thread of its own.
//! Dropping the pool (its backend) ends its VMs; one still booting then is ended when it is
//! ready. A VM's helpers die with the thread that started them (their death signal), so the
//! thread that booted a guest lives, parked, until that guest's [`Warm`] is dropped.

use std::sync::{Arc, Mutex, Weak};

use hull_vm::vm::Booted;
use hull_vm::VmRun;

/// The guests booted ahead, for one shape of run.
#[derive(Clone, Debug, Default)]
pub struct WarmVms(Arc<Mutex<Pool>>);

/// A guest booted ahead, and what keeps the thread that booted it (and so its helpers) alive
/// until the guest's run is over.
#[derive(Debug)]
pub struct Warm {
    vm: Booted,
    alive: std::sync::mpsc::Sender<()>,
}

impl Warm {
    /// [`Booted::exec`], the booting thread kept until the guest has ended.
    pub fn exec(
        self,
        run: &VmRun,
        input: Option<hull_vm::vm::Input>,
        sink: &mut dyn FnMut(hull_vm::proto::Stream, &[u8]),
    ) -> Result<hull_vm::VmOutcome, hull_vm::VmError> {
        let Warm { vm, alive } = self;
        let out = vm.exec(run, input, sink);
        drop(alive);
        out
    }
}

#[derive(Debug, Default)]
struct Pool {
    /// The shape the guests were booted for ([`shape`]).
    shape: Option<VmRun>,
    ready: Vec<Warm>,
    /// Boots under way for `shape`.
    booting: usize,
}

/// `run` without what a call gives a booted guest: its program, deadline and output cap.
fn shape(run: &VmRun) -> VmRun {
    let mut s = run.clone();
    s.exec = hull_vm::proto::Exec {
        argv: Vec::new(),
        env: Vec::new(),
        cwd: String::new(),
        stdin: false,
        hostname: String::new(),
        memory: None,
        pids: None,
    };
    s.timeout = std::time::Duration::ZERO;
    s.max_output = 0;
    s
}

fn lock(p: &Mutex<Pool>) -> std::sync::MutexGuard<'_, Pool> {
    p.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WarmVms {
    /// A guest booted for `run`'s shape, if one is ready.
    pub fn take(&self, run: &VmRun) -> Option<Warm> {
        let mut p = lock(&self.0);
        if p.shape.as_ref() == Some(&shape(run)) {
            p.ready.pop()
        } else {
            None
        }
    }

    /// Boots guests for `run`'s shape until `n` are ready or booting; guests of another shape
    /// (the session's settings changed) are ended.
    pub fn refill(&self, run: &VmRun, n: usize) {
        let want = shape(run);
        let mut p = lock(&self.0);
        if p.shape.as_ref() != Some(&want) {
            p.ready.clear();
            p.booting = 0;
            p.shape = Some(want.clone());
        }
        while p.ready.len() + p.booting < n {
            p.booting += 1;
            let pool = Arc::downgrade(&self.0);
            let run = want.clone();
            // Started with the forwarded signals blocked: they belong to the thread that
            // waits on a box or a VM, never to this one.
            let started = hull_box::spawn_helper("hull-vm-prewarm", move || boot_into(&pool, &run));
            if started.is_none() {
                p.booting -= 1;
                return;
            }
        }
    }
}

/// Boots a guest for `run` and hands it to the pool, if the pool still wants that shape (else
/// it is ended). A guest that fails to boot is left out: the next call boots its own, and says
/// why if it fails too.
fn boot_into(pool: &Weak<Mutex<Pool>>, run: &VmRun) {
    let booted = hull_vm::vm::boot(run);
    let (alive, ended) = std::sync::mpsc::channel::<()>();
    {
        let Some(pool) = pool.upgrade() else { return };
        let mut p = lock(&pool);
        if p.shape.as_ref() != Some(run) {
            return;
        }
        p.booting = p.booting.saturating_sub(1);
        match booted {
            Ok(vm) => p.ready.push(Warm { vm, alive }),
            Err(_) => return,
        }
    }
    // Until the guest's `Warm` is dropped (its run over, or the pool gone): this thread's end
    // would kill its helpers.
    let _ = ended.recv();
}
