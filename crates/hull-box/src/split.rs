//! A box's plan split for a template (see `template.rs`), and the steps of the two processes
//! only templates have, each in a vocabulary of its own:
//!
//! - the template process, which builds a skeleton once: [`TemplatePlan`], box [`Step`]s of the
//!   skeleton, then its own [`TemplateStep`]s (keep the namespace, pivot a copy, hold it);
//! - a templated box's entry process, which joins the template and forks the box's pid 1:
//!   [`TemplatedPlan`], its [`EntryStep`]s, the fork, then pid 1's box [`Step`]s.
//!
//! A fresh box's [`BoxPlan`] holds box steps only, so no template or entry step can appear in
//! it; and the steps a templated box's pid 1 runs are the ones the type-state builder made
//! (unstaged, the skeleton taken out), never patched afterwards. [`LaunchPlan`] is what a box's
//! first process runs, fresh or templated; [`Steps`] names the step at the index a child
//! reports (setup errors, `HULL_TRACE_STEPS`), in whichever vocabulary it is.

use std::fmt;

use crate::plan::{ns_names, source_fd, BoxPath, BoxPlan, IdMaps, Step};

/// The descriptor a template process keeps its first mount namespace at (below the sources').
pub const TEMPLATE_HOST_FD: i32 = 899;

/// One step of a template process. It builds the box's skeleton with ordinary box steps, then
/// keeps what boxes enter.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum TemplateStep {
    /// A step of the skeleton, as a fresh box would run it (ids, private mounts, the root tmpfs
    /// and what is bound into it, the seal, a procfs of the template's own pid namespace).
    Box(Step),
    /// Keep the mount namespace the skeleton was built in (descriptor `keep_fd`, with the
    /// host's tree, where boxes open their bind sources), then, in a copy of it, pivot into the
    /// sealed root and detach the host's tree: the namespace boxes copy holds nothing else, so
    /// they need no pivot (and no unmount) of their own.
    LeanRoot { root: BoxPath, keep_fd: i32 },
    /// Report the finished skeleton (sending `keep_fd`), then wait until the supervisor has
    /// taken descriptors of our namespaces (it closes the channel), and exit.
    HoldTemplate { keep_fd: i32 },
}

impl TemplateStep {
    /// A short name of the step, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            TemplateStep::Box(s) => s.name(),
            TemplateStep::LeanRoot { .. } => "pivot the template into its root",
            TemplateStep::HoldTemplate { .. } => "hold the template",
        }
    }

    /// The path the step works on, for errors.
    pub fn path(&self) -> Option<String> {
        match self {
            TemplateStep::Box(s) => s.path(),
            TemplateStep::LeanRoot { root, .. } => Some(root.shown.clone()),
            TemplateStep::HoldTemplate { .. } => None,
        }
    }
}

impl fmt::Display for TemplateStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateStep::Box(s) => s.fmt(f),
            TemplateStep::LeanRoot { root, keep_fd } => write!(f, "keep this mount namespace as fd {keep_fd}, then in a copy of it pivot_root to {} and detach the host's tree", root.shown),
            TemplateStep::HoldTemplate { .. } => write!(f, "report the template ready, hold it until the supervisor has its namespaces"),
        }
    }
}

/// One step of a templated box's entry process (a plain fork of the supervisor), which then
/// forks the box's pid 1.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum EntryStep {
    /// A box step the entry process runs for the box: before joining the template (tie the
    /// box to its supervisor, join its cgroup, take an idmapped source), or after entering it
    /// (a cgroup namespace, which needs the box's own user namespace).
    Box(Step),
    /// Join a template's user namespace and the mount namespace it was built in (descriptors the
    /// Runtime holds), where the host's paths are, to clone bind sources from.
    JoinTemplate {
        user_fd: i32,
        mnt_fd: i32,
        /// The template's root is not the host's (see [`crate::remap`]): become it after
        /// joining, so the box's own user namespace is made by, and maps, that id.
        become_root: bool,
    },
    /// Open a bind source like [`Step::OpenSource`], then replace the descriptor with a detached
    /// copy of its mount tree (`open_tree(OPEN_TREE_CLONE)`), attached later by pid 1 with
    /// [`Step::AttachSource`].
    CloneSource { path: BoxPath, fd: i32 },
    /// Join the template's sealed root namespace, then unshare the box's own namespaces below
    /// it (`flags`, a fresh user namespace first, so the template's mounts arrive locked and
    /// read-only) and map our ids in it. `net_fd` is a ready network namespace (loopback up)
    /// of the template's pool, joined instead of unsharing a new one; `own_fds` a ready user
    /// namespace of the pool (below the template's, ids mapped) and the ipc and uts namespaces
    /// it owns, joined last instead of unsharing them.
    EnterTemplate {
        mnt_fd: i32,
        net_fd: Option<i32>,
        own_fds: Option<[i32; 3]>,
        flags: libc::c_int,
    },
}

impl EntryStep {
    /// A short name of the step, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            EntryStep::Box(s) => s.name(),
            EntryStep::JoinTemplate { .. } => "join the template's namespaces",
            EntryStep::CloneSource { .. } => "clone bind source",
            EntryStep::EnterTemplate { .. } => "enter the template's root",
        }
    }

    /// The path the step works on, for errors.
    pub fn path(&self) -> Option<String> {
        match self {
            EntryStep::Box(s) => s.path(),
            EntryStep::CloneSource { path, .. } => Some(path.shown.clone()),
            EntryStep::JoinTemplate { .. } | EntryStep::EnterTemplate { .. } => None,
        }
    }

    /// Whether the step holds descriptor `fd` (one of the template's, or a pooled namespace):
    /// a bind source must not be opened at that number.
    pub(crate) fn holds(&self, fd: i32) -> bool {
        match self {
            EntryStep::JoinTemplate {
                user_fd, mnt_fd, ..
            } => *user_fd == fd || *mnt_fd == fd,
            EntryStep::EnterTemplate {
                mnt_fd,
                net_fd,
                own_fds,
                ..
            } => *mnt_fd == fd || *net_fd == Some(fd) || own_fds.is_some_and(|o| o.contains(&fd)),
            EntryStep::Box(_) | EntryStep::CloneSource { .. } => false,
        }
    }
}

impl fmt::Display for EntryStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryStep::Box(s) => s.fmt(f),
            EntryStep::JoinTemplate { become_root, .. } => write!(f, "setns into the template's user namespace{} and the mount namespace it was built in", if *become_root { " (becoming its root)" } else { "" }),
            EntryStep::CloneSource { path, fd } => write!(f, "open {} (O_PATH) and clone its mount tree (detached) as fd {fd}", path.shown),
            EntryStep::EnterTemplate { flags, net_fd, own_fds, .. } => {
                let mut flags = *flags;
                write!(f, "setns into the template's sealed root")?;
                if net_fd.is_some() {
                    flags &= !libc::CLONE_NEWNET;
                    write!(f, ", a fresh network namespace from its pool")?;
                }
                if own_fds.is_some() {
                    flags &= !(libc::CLONE_NEWUSER | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS);
                    write!(f, ", a fresh user namespace from its pool (uid 0 -> 0) with its ipc and uts namespaces")?;
                }
                write!(f, ", then unshare {}", ns_names(flags).join(", "))?;
                if own_fds.is_none() {
                    write!(f, " and map uid 0 -> 0")?;
                }
                Ok(())
            }
        }
    }
}

/// One step of any plan, by reference: what a setup error, a trace line or a printed plan
/// names, whichever process ran it.
#[derive(Clone, Copy, Debug)]
pub enum StepRef<'a> {
    /// A box step (a fresh box's, a templated box's pid 1's).
    Box(&'a Step),
    Template(&'a TemplateStep),
    Entry(&'a EntryStep),
    /// A templated box's entry process forks pid 1 (between its own steps and pid 1's).
    StartPid1,
}

impl StepRef<'_> {
    /// A short name of the step, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            StepRef::Box(s) => s.name(),
            StepRef::Template(s) => s.name(),
            StepRef::Entry(s) => s.name(),
            StepRef::StartPid1 => "fork pid 1",
        }
    }

    /// The path the step works on, for errors.
    pub fn path(&self) -> Option<String> {
        match self {
            StepRef::Box(s) => s.path(),
            StepRef::Template(s) => s.path(),
            StepRef::Entry(s) => s.path(),
            StepRef::StartPid1 => None,
        }
    }

    /// The box step this is, in whichever process it ran.
    pub fn as_box(&self) -> Option<&Step> {
        match *self {
            StepRef::Box(s)
            | StepRef::Template(TemplateStep::Box(s))
            | StepRef::Entry(EntryStep::Box(s)) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for StepRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepRef::Box(s) => s.fmt(f),
            StepRef::Template(s) => s.fmt(f),
            StepRef::Entry(s) => s.fmt(f),
            StepRef::StartPid1 => write!(f, "fork pid 1 of the new pid namespace (a child of the supervisor); this process exits"),
        }
    }
}

/// A plan whose steps are numbered as the process running it reports them: a failed step's
/// index (`SetupFailed`), the slots of `HULL_TRACE_STEPS`.
pub trait Steps {
    /// The step at `index` (from 0), if the plan has one.
    fn step(&self, index: usize) -> Option<StepRef<'_>>;
}

impl Steps for BoxPlan {
    fn step(&self, index: usize) -> Option<StepRef<'_>> {
        self.steps.get(index).map(StepRef::Box)
    }
}

/// Writes `plan`'s steps numbered from 1, after `header` as step 0 (how the first process
/// starts).
fn write_numbered(f: &mut fmt::Formatter<'_>, header: &str, plan: &dyn Steps) -> fmt::Result {
    writeln!(f, " 0. {header}")?;
    let mut i = 0;
    while let Some(s) = plan.step(i) {
        writeln!(f, "{:>2}. {s}", i + 1)?;
        i += 1;
    }
    Ok(())
}

/// What a template process runs (cloned with its own user, mount and pid namespaces): the
/// skeleton, then [`TemplateStep::LeanRoot`] and [`TemplateStep::HoldTemplate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplatePlan {
    pub steps: Vec<TemplateStep>,
    /// Namespaces created by the clone (CLONE_NEW* flags).
    pub clone_flags: libc::c_int,
}

impl TemplatePlan {
    /// What identifies a template: a hash of every skeleton step (paths, sizes, file contents),
    /// cheap enough to compute per box.
    pub fn template_key(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for s in self
            .steps
            .iter()
            .filter(|s| !matches!(s, TemplateStep::Box(Step::DieWithSupervisor { .. })))
        {
            s.hash(&mut h);
        }
        h.finish()
    }

    /// Who maps the template's ids, when it cannot map them itself (host root's template).
    pub(crate) fn id_maps(&self) -> Option<&IdMaps> {
        self.steps.iter().find_map(|s| match s {
            TemplateStep::Box(Step::AwaitIdMaps { maps }) => Some(maps),
            _ => None,
        })
    }
}

impl Steps for TemplatePlan {
    fn step(&self, index: usize) -> Option<StepRef<'_>> {
        self.steps.get(index).map(StepRef::Template)
    }
}

impl fmt::Display for TemplatePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header = format!(
            "clone with new namespaces: {}",
            ns_names(self.clone_flags).join(", ")
        );
        write_numbered(f, &header, self)
    }
}

/// What a box entering a template runs: a plain fork (the entry process) runs `entry`, forks
/// pid 1 (step `entry.len()`), and pid 1 runs `pid1`, the rest of the box's own plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplatedPlan {
    pub entry: Vec<EntryStep>,
    pub pid1: Vec<Step>,
}

impl Steps for TemplatedPlan {
    fn step(&self, index: usize) -> Option<StepRef<'_>> {
        let forked = self.entry.len();
        match index.checked_sub(forked) {
            None => self.entry.get(index).map(StepRef::Entry),
            Some(0) => Some(StepRef::StartPid1),
            Some(n) => self.pid1.get(n - 1).map(StepRef::Box),
        }
    }
}

impl fmt::Display for TemplatedPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_numbered(f, "fork (no new namespaces yet)", self)
    }
}

/// What a box's first process runs: a fresh box's whole plan (the clone is pid 1), or the plan
/// of a box entering a template (the clone is its entry process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchPlan {
    Fresh(BoxPlan),
    Templated(TemplatedPlan),
}

impl LaunchPlan {
    /// Namespaces the first process is cloned with (none for an entry process: a plain fork).
    pub fn clone_flags(&self) -> libc::c_int {
        match self {
            LaunchPlan::Fresh(p) => p.clone_flags,
            LaunchPlan::Templated(_) => 0,
        }
    }

    /// The steps pid 1 runs, ending in the program's `Exec`.
    pub fn pid1_steps(&self) -> &[Step] {
        match self {
            LaunchPlan::Fresh(p) => &p.steps,
            LaunchPlan::Templated(p) => &p.pid1,
        }
    }

    /// Every box step, in whichever process it runs.
    pub fn box_steps(&self) -> impl Iterator<Item = &Step> {
        let entry = match self {
            LaunchPlan::Fresh(_) => &[][..],
            LaunchPlan::Templated(p) => &p.entry[..],
        };
        entry
            .iter()
            .filter_map(|s| match s {
                EntryStep::Box(s) => Some(s),
                _ => None,
            })
            .chain(self.pid1_steps())
    }

    /// Who maps the box's ids, when the box cannot map them itself (a templated box's are the
    /// template's, mapped when it was built).
    pub(crate) fn id_maps(&self) -> Option<&IdMaps> {
        match self {
            LaunchPlan::Fresh(p) => p.id_maps(),
            LaunchPlan::Templated(_) => None,
        }
    }
}

impl Steps for LaunchPlan {
    fn step(&self, index: usize) -> Option<StepRef<'_>> {
        match self {
            LaunchPlan::Fresh(p) => p.step(index),
            LaunchPlan::Templated(p) => p.step(index),
        }
    }
}

impl fmt::Display for LaunchPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchPlan::Fresh(p) => p.fmt(f),
            LaunchPlan::Templated(p) => p.fmt(f),
        }
    }
}

impl BoxPlan {
    /// Splits this plan for a template (see `template.rs`): the read-only skeleton, which a
    /// template process builds once in its own user and mount namespaces (then pivots a copy of
    /// that namespace into it), and the rest, which each box runs after entering a copy of the
    /// pivoted one: its bind sources are cloned from the template's first namespace (which
    /// still has the host's paths) and attached, and its paths lose the staging prefix, since
    /// the root is already in place. `Err` (the plan, whole) when the skeleton depends on this
    /// box (binds from descriptors the box opens itself, as `--rootfs` entries are), so it
    /// cannot be shared. The box's part is an [`EntryPlan`]: it becomes the plan the box runs
    /// once the template (and what its pools hold) is known, so no step ever carries a
    /// descriptor to fill in.
    pub fn split_template(self) -> Result<(TemplatePlan, EntryPlan), BoxPlan> {
        // A template's user namespace maps one id; a box with sub-ids is built whole.
        let become_root = match self.id_maps() {
            None => false,
            Some(IdMaps::Direct { count: 1, .. }) => true,
            Some(_) => return Err(self),
        };
        let root = self
            .steps
            .iter()
            .position(|s| matches!(s, Step::MountRoot { .. }));
        let seal = self
            .steps
            .iter()
            .position(|s| matches!(s, Step::Seal { .. }));
        let stage = self.steps.iter().find_map(|s| match s {
            Step::Pivot { root } => Some(root.clone()),
            _ => None,
        });
        let (Some(root), Some(seal), Some(stage)) = (root, seal, stage) else {
            return Err(self);
        };
        let own_sources = self.steps[root..seal]
            .iter()
            .any(|s| matches!(s, Step::Bind { source, .. } if source_fd(source).is_some()));
        // After the seal every bind must come from a descriptor: the pivoted template has no
        // host paths to bind from.
        let host_binds = self.steps[seal..]
            .iter()
            .any(|s| matches!(s, Step::Bind { source, .. } if source_fd(source).is_none()));
        // Mount points made inside host directories open their sources by path: built whole.
        let below = self
            .steps
            .iter()
            .any(|s| matches!(s, Step::BindBelow { .. } | Step::TmpfsBelow { .. }));
        if own_sources || host_binds || below || root == 0 {
            return Err(self);
        }
        let flags = self.clone_flags;
        let mut steps = self.steps;
        let rest = steps.split_off(seal + 1);
        let skeleton = steps.split_off(root - 1); // PrivatizeMounts, MountRoot .. Seal
        let mut template = Vec::with_capacity(skeleton.len() + 4);
        let mut head = Vec::with_capacity(4);
        let mut die = None;
        let mut sources = Vec::new();
        for s in steps {
            match s {
                Step::DieWithSupervisor { supervisor } => {
                    die = Some(supervisor);
                    template.push(TemplateStep::Box(Step::DieWithSupervisor { supervisor }));
                    head.push(Step::DieWithSupervisor { supervisor });
                }
                // The template's ids are the box's: the template maps them, and the box's own
                // user namespace, made below it, maps its root to the template's.
                Step::MapIds { .. } | Step::AwaitIdMaps { .. } | Step::BecomeRoot => {
                    template.push(TemplateStep::Box(s));
                }
                // After the template is entered: it needs the box's own user namespace.
                Step::UnshareCgroupNs => {}
                // A gateway box enters a pooled network namespace whose TAP the pool made (see
                // `EntryPlan::enter`): it opens no device.
                Step::OpenTun { .. } => {}
                Step::OpenSource { path, fd } => sources.push((path, fd)),
                // Cgroup joins run first, from the host's namespaces.
                other => head.push(other),
            }
        }
        template.extend(skeleton.into_iter().map(TemplateStep::Box));
        // A box may mount a procfs only where one is already fully visible; the pivoted root has
        // none of the host's, so the template mounts one of its own empty pid namespace (the
        // template process is its pid 1 and leaves it), which each box's procfs then covers.
        template.push(TemplateStep::Box(Step::Proc {
            target: BoxPath::staged_at(&stage.shown, "/proc"),
        }));
        template.push(TemplateStep::LeanRoot {
            root: stage.clone(),
            keep_fd: TEMPLATE_HOST_FD,
        });
        template.push(TemplateStep::HoldTemplate {
            keep_fd: TEMPLATE_HOST_FD,
        });
        let mut pid1 = Vec::with_capacity(rest.len() + 1);
        if let Some(supervisor) = die {
            pid1.push(Step::DieWithSupervisor { supervisor });
        }
        for s in rest {
            let mut s = match s {
                Step::Pivot { .. } => continue,
                // Every bind after the seal is from a descriptor (checked above).
                Step::Bind {
                    source,
                    target,
                    optional,
                } => match source_fd(&source) {
                    Some(fd) => Step::AttachSource {
                        fd,
                        source: source.shown,
                        target,
                    },
                    None => Step::Bind {
                        source,
                        target,
                        optional,
                    },
                },
                other => other,
            };
            for p in s.paths_mut() {
                p.unstage(&stage.c);
            }
            pid1.push(s);
        }
        Ok((
            TemplatePlan {
                steps: template,
                clone_flags: libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID,
            },
            EntryPlan {
                head,
                become_root,
                sources,
                flags,
                pid1,
            },
        ))
    }
}

/// The descriptors a box enters a template through (see `template.rs`): the template's user
/// namespace, the mount namespace it was built in (`host`: the host's paths, where bind
/// sources are cloned from) and its pivoted one (`root`), and from its pools, when they had
/// one, a network namespace and a user namespace with the ipc and uts namespaces it owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TemplateFds {
    pub user: i32,
    pub host: i32,
    pub root: i32,
    pub net: Option<i32>,
    pub own: Option<[i32; 3]>,
}

/// A box's part of a split plan ([`BoxPlan::split_template`]), before it knows the template
/// it enters: what its entry process runs (the head: dying with the supervisor, joining the
/// cgroup; then the template's namespaces, the cloned bind sources, its own namespaces below
/// the template's) and what its pid 1 runs (the rest of the box's plan, paths unstaged).
/// [`EntryPlan::enter`] turns it into the plan the box runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPlan {
    head: Vec<Step>,
    /// The template's root is not the host's (see [`crate::remap`]).
    become_root: bool,
    /// The bind sources to clone, at their descriptor numbers.
    sources: Vec<(BoxPath, i32)>,
    /// The namespaces the box unshares below the template's.
    flags: libc::c_int,
    pid1: Vec<Step>,
}

impl EntryPlan {
    /// Whether this box could use a pooled network namespace: it wants a private one, and
    /// keeps no capability that would need its own user namespace to own it (binding low ports,
    /// raw sockets, configuring interfaces).
    pub fn can_share_pooled_net(&self) -> bool {
        let net_caps = (1u64 << 10) | (1u64 << 12) | (1u64 << 13); // NET_BIND_SERVICE, NET_ADMIN, NET_RAW
        let keeps = self
            .pid1
            .iter()
            .any(|s| matches!(s, Step::DropCaps { keep, .. } if keep & net_caps != 0));
        self.flags & libc::CLONE_NEWNET != 0 && !keeps
    }

    /// The plan the box runs to enter the template whose descriptors are `fds`: a pooled
    /// network namespace comes with its loopback up, and the box has no capability to
    /// configure it, so its own `LoopbackUp` step goes; for a gateway box it comes with its TAP
    /// made (the supervisor holds it), so `Tap` becomes `AwaitGateway`. (A gateway box enters
    /// only with one: `Templates::prepare` builds it whole otherwise.)
    pub fn enter(self, fds: &TemplateFds) -> TemplatedPlan {
        let mut entry: Vec<EntryStep> = self.head.into_iter().map(EntryStep::Box).collect();
        entry.push(EntryStep::JoinTemplate {
            user_fd: fds.user,
            mnt_fd: fds.host,
            become_root: self.become_root,
        });
        entry.extend(
            self.sources
                .into_iter()
                .map(|(path, fd)| EntryStep::CloneSource { path, fd }),
        );
        entry.push(EntryStep::EnterTemplate {
            mnt_fd: fds.root,
            net_fd: fds.net,
            own_fds: fds.own,
            flags: self.flags,
        });
        entry.push(EntryStep::Box(Step::UnshareCgroupNs));
        let pid1 = self
            .pid1
            .into_iter()
            .filter(|s| fds.net.is_none() || !matches!(s, Step::LoopbackUp))
            .map(|s| match s {
                Step::Tap { .. } if fds.net.is_some() => Step::AwaitGateway,
                other => other,
            })
            .collect();
        TemplatedPlan { entry, pid1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A templated box's steps are numbered across its two processes as they report them: the
    /// entry process's from 0, its fork of pid 1 next, then pid 1's.
    #[test]
    fn a_templated_plan_numbers_its_steps_across_entry_fork_and_pid1() {
        let plan = TemplatedPlan {
            entry: vec![
                EntryStep::Box(Step::DieWithSupervisor { supervisor: 1 }),
                EntryStep::JoinTemplate {
                    user_fd: 905,
                    mnt_fd: 906,
                    become_root: false,
                },
            ],
            pid1: vec![Step::NoNewPrivs, Step::LoopbackUp],
        };
        let names: Vec<&str> = (0..5)
            .map(|i| plan.step(i).map_or("none", |s| s.name()))
            .collect();
        assert_eq!(
            names,
            [
                "tie the box to its supervisor",
                "join the template's namespaces",
                "fork pid 1",
                "set no_new_privs",
                "bring up loopback"
            ]
        );
        assert!(plan.step(5).is_none());
        assert!(matches!(
            plan.step(3).and_then(|s| s.as_box().cloned()),
            Some(Step::NoNewPrivs)
        ));
        let shown = LaunchPlan::Templated(plan).to_string();
        assert!(
            shown.starts_with(" 0. fork (no new namespaces yet)\n"),
            "{shown}"
        );
        assert!(
            shown.contains("\n 3. fork pid 1 of the new pid namespace"),
            "{shown}"
        );
        assert!(shown.contains("\n 5. bring up lo"), "{shown}");
    }
}
