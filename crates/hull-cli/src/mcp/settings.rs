//! `hull mcp`'s settings, read from `HULL_MCP_*` environment variables (MCP clients start
//! servers with an `env` map, not flags). Every refusal names the variable and the fix.

use std::path::PathBuf;
use std::time::Duration;

use hull::SandboxRequest;

/// The settings, after checking.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub setup: Option<String>,
    pub image: Option<String>,
    pub memory_mb: u64,
    pub timeout: Duration,
    pub workspace: Option<PathBuf>,
    /// The most bytes of each text section (stdout, stderr, a result, a file) a tool result shows.
    pub max_output: usize,
    /// The boxes' boundary (`HULL_MCP_ISOLATION`): namespace boxes, or a microVM per call.
    pub isolation: hull_api::Isolation,
}

pub const DEFAULT_MAX_OUTPUT: usize = 20_000;

/// Reads the settings through `get` (the environment in `hull mcp`, a map in tests).
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let val = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let setup = val("HULL_MCP_SETUP");
    if setup.as_deref().is_some_and(|s| s.contains('\0')) {
        return Err("HULL_MCP_SETUP: contains a NUL byte".into());
    }
    let image = val("HULL_MCP_IMAGE");
    let memory_mb = match val("HULL_MCP_MEMORY") {
        None => 512,
        Some(m) => {
            let bytes = hull_api::size::parse_size(m.trim())
                .map_err(|e| format!("HULL_MCP_MEMORY={m}: {e}; write e.g. 512m or 2g"))?;
            let mb = bytes >> 20;
            if mb < 16 {
                return Err(format!(
                    "HULL_MCP_MEMORY={m}: too small for a box; give at least 16m"
                ));
            }
            mb
        }
    };
    let timeout = match val("HULL_MCP_TIMEOUT") {
        None => Duration::from_secs(30),
        Some(t) => {
            hull_api::duration::parse_duration(&t).map_err(|e| format!("HULL_MCP_TIMEOUT: {e}"))?
        }
    };
    let workspace = match val("HULL_MCP_WORKSPACE") {
        None => None,
        Some(w) => {
            let p = PathBuf::from(&w);
            if !p.is_absolute() {
                return Err(format!("HULL_MCP_WORKSPACE={w}: give an absolute host path (MCP clients start servers in a directory of their choosing)"));
            }
            Some(p)
        }
    };
    let max_output = match val("HULL_MCP_MAX_OUTPUT") {
        None => DEFAULT_MAX_OUTPUT,
        Some(m) => {
            let t = m.trim();
            // A bare number is bytes here (output is counted in bytes, not MiB).
            let n = match t.parse::<u64>() {
                Ok(n) => n,
                Err(_) => hull_api::size::parse_size(t).map_err(|e| {
                    format!("HULL_MCP_MAX_OUTPUT={m}: {e}; or write a byte count like 20000")
                })?,
            };
            usize::try_from(n)
                .ok()
                .filter(|n| (256..=(64 << 20)).contains(n))
                .ok_or_else(|| format!("HULL_MCP_MAX_OUTPUT={m}: give between 256 bytes and 64m"))?
        }
    };
    let isolation = match val("HULL_MCP_ISOLATION") {
        None => hull_api::Isolation::Namespace,
        Some(i) => i
            .trim()
            .parse::<hull_api::Isolation>()
            .map_err(|e| format!("HULL_MCP_ISOLATION: {e}"))?,
    };
    if isolation == hull_api::Isolation::Vm && setup.is_some() {
        return Err("HULL_MCP_SETUP: a setup is not supported with HULL_MCP_ISOLATION=vm yet (it needs the network); unset one of them".into());
    }
    Ok(Settings {
        setup,
        image,
        memory_mb,
        timeout,
        workspace,
        max_output,
        isolation,
    })
}

impl Settings {
    /// The Sandbox this server keeps for its life. The box's own output cap is larger than what
    /// a result shows, so the head and tail of long output both reach the model.
    pub fn sandbox_config(&self) -> SandboxRequest {
        SandboxRequest {
            image: self.image.clone(),
            setup: self.setup.clone(),
            workspace: self.workspace.clone(),
            memory: Some(self.memory_mb << 20),
            timeout: self.timeout,
            max_output: Some(
                u64::try_from(self.max_output)
                    .unwrap_or(u64::MAX)
                    .saturating_mul(8)
                    .max(1 << 20),
            ),
            isolation: self.isolation,
            ..SandboxRequest::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        from_env(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_and_values() {
        let s = with(&[]).unwrap();
        assert_eq!(
            (s.memory_mb, s.timeout, s.max_output),
            (512, Duration::from_secs(30), DEFAULT_MAX_OUTPUT)
        );
        let s = with(&[
            ("HULL_MCP_MEMORY", "1g"),
            ("HULL_MCP_TIMEOUT", "2m"),
            ("HULL_MCP_MAX_OUTPUT", "4k"),
            ("HULL_MCP_WORKSPACE", "/tmp/w"),
            ("HULL_MCP_SETUP", "true"),
        ])
        .unwrap();
        assert_eq!(
            (s.memory_mb, s.timeout, s.max_output),
            (1024, Duration::from_secs(120), 4096)
        );
        assert_eq!(s.workspace, Some(PathBuf::from("/tmp/w")));
        assert_eq!(
            with(&[("HULL_MCP_MAX_OUTPUT", "1000")]).unwrap().max_output,
            1000
        );
        assert_eq!(
            with(&[("HULL_MCP_TIMEOUT", "")]).unwrap().timeout,
            Duration::from_secs(30)
        );
        let vm = with(&[("HULL_MCP_ISOLATION", "vm")]).unwrap();
        assert_eq!(vm.sandbox_config().isolation, hull_api::Isolation::Vm);
        assert_eq!(s.sandbox_config().isolation, hull_api::Isolation::Namespace);
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (k, v) in [
            ("HULL_MCP_MEMORY", "lots"),
            ("HULL_MCP_MEMORY", "1m"),
            ("HULL_MCP_TIMEOUT", "soon"),
            ("HULL_MCP_TIMEOUT", "0"),
            ("HULL_MCP_WORKSPACE", "rel/dir"),
            ("HULL_MCP_MAX_OUTPUT", "10"),
            ("HULL_MCP_MAX_OUTPUT", "x"),
            ("HULL_MCP_ISOLATION", "kvm"),
        ] {
            let e = with(&[(k, v)]).unwrap_err();
            assert!(e.starts_with(k), "{k}={v}: {e}");
        }
        let e = with(&[("HULL_MCP_ISOLATION", "vm"), ("HULL_MCP_SETUP", "true")]).unwrap_err();
        assert!(
            e.contains("HULL_MCP_SETUP") && e.contains("HULL_MCP_ISOLATION=vm"),
            "{e}"
        );
    }
}
