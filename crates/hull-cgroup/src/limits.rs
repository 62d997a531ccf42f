//! What a box's cgroup caps: the [`Controller`]s hull uses and a box's [`Limits`] on them. A
//! leaf module: every other module of the crate uses these.

use std::fmt;

/// Caps for one box. `None` leaves a resource unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// RAM cap in bytes; swap is capped too so it cannot be used to escape.
    pub memory_bytes: Option<u64>,
    /// Maximum number of tasks (processes and threads) in the box.
    pub pids: Option<u64>,
    /// CPU bandwidth in thousandths of a CPU: 1000 is one full CPU, 250 a quarter. Values below
    /// 10 are raised to 10, the kernel's smallest quota (1 ms per 100 ms period).
    pub cpu_millis: Option<u64>,
}

impl Limits {
    pub fn get(&self, c: Controller) -> Option<u64> {
        match c {
            Controller::Memory => self.memory_bytes,
            Controller::Pids => self.pids,
            Controller::Cpu => self.cpu_millis,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    pub const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    /// The kernel's name for the controller, in v1 and v2 alike.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Controller::Memory => 0,
            Controller::Pids => 1,
            Controller::Cpu => 2,
        }
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
