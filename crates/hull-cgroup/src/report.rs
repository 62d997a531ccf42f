//! What `hull doctor` and box warnings show about each controller: usable (and where boxes go) or
//! not (why, and what the user can do about it).

use std::fmt;
use std::path::PathBuf;

use crate::layout::CgroupVersion;
use crate::limits::Controller;

/// A reason a controller cannot be used, with the fix to offer the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub reason: String,
    pub fix: String,
}

impl Problem {
    pub(crate) fn new(reason: impl Into<String>, fix: impl Into<String>) -> Problem {
        Problem {
            reason: reason.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; fix: {}", self.reason, self.fix)
    }
}

/// The fix for every "this cgroup is not yours to subdivide" problem.
pub(crate) const FIX_DELEGATE: &str = "run hull in a delegated cgroup, e.g. \
    `systemd-run --user --scope -p Delegate=yes hull ...`, or set HULL_CGROUP_PARENT to an empty \
    cgroup delegated to your user";

/// The fix when a v1 hierarchy is not writable by this user.
pub(crate) const FIX_V1_PERMISSION: &str = "run hull as root, or have root create a cgroup owned \
    by your user in each v1 hierarchy (mkdir + chown of the directory, cgroup.procs and tasks) \
    and set HULL_CGROUP_PARENT to its path relative to the hierarchy root";

/// One controller's state on this host, flat so `hull doctor` can print or serialise it as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerReport {
    pub controller: Controller,
    pub usable: bool,
    /// Through which cgroup version, when usable.
    pub version: Option<CgroupVersion>,
    /// The directory box cgroups are created in, when usable.
    pub box_parent: Option<PathBuf>,
    /// Where boxes go (plus any one-time setup hull will do on the first box), or why unusable.
    pub detail: String,
    /// What the user can do, when unusable.
    pub fix: Option<String>,
}

impl ControllerReport {
    pub(crate) fn usable(
        controller: Controller,
        version: CgroupVersion,
        parent: PathBuf,
        note: Option<String>,
    ) -> Self {
        let mut detail = format!("cgroup {} under {}", version.label(), parent.display());
        if let Some(note) = note {
            detail.push_str(&format!(" ({note})"));
        }
        ControllerReport {
            controller,
            usable: true,
            version: Some(version),
            box_parent: Some(parent),
            detail,
            fix: None,
        }
    }

    pub(crate) fn unavailable(controller: Controller, problem: Problem) -> Self {
        ControllerReport {
            controller,
            usable: false,
            version: None,
            box_parent: None,
            detail: problem.reason,
            fix: Some(problem.fix),
        }
    }
}

impl fmt::Display for ControllerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.fix {
            Some(fix) if !self.usable => write!(
                f,
                "{}: unavailable: {}; fix: {fix}",
                self.controller, self.detail
            ),
            _ => write!(f, "{}: {}", self.controller, self.detail),
        }
    }
}
