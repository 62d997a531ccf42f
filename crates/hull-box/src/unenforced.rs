//! The caps a box asked for that its cgroup does not enforce: warnings in its result, or, with
//! `require_limits`, the error [`crate::BoxError::LimitsUnenforced`]. Typed (the controller and
//! why), so a front end can list them (`hull serve`'s `unenforced`) and a test can match them
//! without reading text. A leaf module: it imports nothing of this crate.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use hull_cgroup::{CgroupError, Controller};

/// One cap that is not enforced, and why.
#[derive(Debug, Clone)]
pub struct Unenforced {
    pub controller: Controller,
    pub reason: Reason,
}

/// Why a cap is not enforced.
#[derive(Debug, Clone)]
pub enum Reason {
    /// The box's cgroup lacks the controller, or the controller refused the limit: hull-cgroup's
    /// reason, which says the fix.
    Controller(String),
    /// The host's cgroups could not be used at all (detected once, when the runtime started;
    /// shared by every box, hence the `Arc`). The cgroup error is this reason's source.
    NoCgroup(Arc<CgroupError>),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Controller(why) => f.write_str(why),
            Reason::NoCgroup(_) => f.write_str("no cgroup is available"),
        }
    }
}

/// The cgroup error itself (not its `Arc`), so a caller can downcast to [`CgroupError`].
impl Error for Reason {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Reason::Controller(_) => None,
            Reason::NoCgroup(e) => Some(&**e),
        }
    }
}

impl Unenforced {
    /// The warning a box's result carries: this cap, why, and the causes of why.
    pub fn warning(&self) -> String {
        with_causes(self.to_string(), self.source())
    }
}

/// `text`, then each cause's text after `: `.
fn with_causes(mut text: String, mut cause: Option<&(dyn Error + 'static)>) -> String {
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// For JSON front ends: `{"controller": "memory", "reason": "..."}`, the reason with its causes.
impl serde::Serialize for Unenforced {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Unenforced", 2)?;
        st.serialize_field("controller", self.controller.name())?;
        st.serialize_field(
            "reason",
            &with_causes(self.reason.to_string(), self.reason.source()),
        )?;
        st.end()
    }
}

/// `Memory cap not enforced: WHY`. The reason's own causes (a cgroup error) come next in a
/// chain, not in this text.
impl fmt::Display for Unenforced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} cap not enforced: {}", self.controller, self.reason)
    }
}

impl Error for Unenforced {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.reason.source()
    }
}

/// Every cap of a box that is not enforced (the error a box with `require_limits` gets).
#[derive(Debug, Clone, Default)]
pub struct UnenforcedCaps(pub Vec<Unenforced>);

impl UnenforcedCaps {
    /// The controllers that are not enforced, in the list's order.
    pub fn controllers(&self) -> impl Iterator<Item = Controller> + '_ {
        self.0.iter().map(|u| u.controller)
    }
}

/// Each cap, `; `-separated.
impl fmt::Display for UnenforcedCaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, u) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{u}")?;
        }
        Ok(())
    }
}

/// The first cap's cause: when there is one (no cgroup at all), every cap shares it.
impl Error for UnenforcedCaps {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.iter().find_map(Error::source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_cgroup_is_each_caps_reason_and_the_lists_cause_once() {
        let cause = Arc::new(CgroupError::NotMounted);
        let caps = UnenforcedCaps(
            [Controller::Memory, Controller::Pids]
                .into_iter()
                .map(|controller| Unenforced {
                    controller,
                    reason: Reason::NoCgroup(Arc::clone(&cause)),
                })
                .collect(),
        );
        assert_eq!(
            caps.controllers().collect::<Vec<_>>(),
            [Controller::Memory, Controller::Pids]
        );
        assert_eq!(
            caps.to_string(),
            "Memory cap not enforced: no cgroup is available; Pids cap not enforced: no cgroup is available"
        );
        let source = caps.source().unwrap();
        assert!(matches!(
            source.downcast_ref::<CgroupError>(),
            Some(CgroupError::NotMounted)
        ));
        assert_eq!(
            caps.0[0].warning(),
            format!("Memory cap not enforced: no cgroup is available: {cause}")
        );
        assert_eq!(
            serde_json::to_value(&caps.0[1]).unwrap(),
            serde_json::json!({"controller": "pids", "reason": format!("no cgroup is available: {cause}")})
        );
    }

    #[test]
    fn a_controllers_reason_is_its_text_without_a_cause() {
        let u = Unenforced {
            controller: Controller::Cpu,
            reason: Reason::Controller("cpu is not delegated".into()),
        };
        assert_eq!(u.warning(), "Cpu cap not enforced: cpu is not delegated");
        assert!(u.source().is_none());
    }
}
