//! Which kind of boundary a request's box has: the namespace box on this kernel (the default)
//! or a microVM with a guest kernel of its own (`--isolation vm`, docs/vm.md).

use serde::Deserialize;

/// The boundary a box is built with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Namespaces, seccomp and cgroups on the host's kernel.
    #[default]
    Namespace,
    /// A VM under a guest kernel of its own (QEMU microvm).
    Vm,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Namespace => "namespace",
            Isolation::Vm => "vm",
        }
    }
}

impl std::str::FromStr for Isolation {
    type Err = String;

    fn from_str(s: &str) -> Result<Isolation, String> {
        match s {
            "namespace" => Ok(Isolation::Namespace),
            "vm" => Ok(Isolation::Vm),
            other => Err(format!(
                "`{other}` is not an isolation: give `namespace` (the default) or `vm`"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_parse_and_others_are_named() {
        assert_eq!("vm".parse::<Isolation>(), Ok(Isolation::Vm));
        assert_eq!(
            serde_json::from_str::<Isolation>("\"namespace\"").unwrap(),
            Isolation::Namespace
        );
        assert!("kvm".parse::<Isolation>().unwrap_err().contains("`kvm`"));
        assert!(serde_json::from_str::<Isolation>("\"kvm\"").is_err());
    }
}
