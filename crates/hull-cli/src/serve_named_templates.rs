//! `hull serve`'s template methods (`named.template_save`, `template_list`, `template_rm`,
//! `template_prune`): the CLI's `hull template save/ls/rm/prune` (`named/template.rs`) for the
//! SDKs, so a client that builds templates (the AI SDK adapter: a sandbox set up and prepared,
//! then frozen) needs no second process. Each is one call of the store's own function, under
//! its lock, exactly as the verb makes it.

use serde_json::{json, Map, Value};

use crate::named::{state, template};
use crate::serve_named::{err, existing, invalid, number, string};

pub const METHODS: &[&str] = &[
    "named.template_save",
    "named.template_list",
    "named.template_rm",
    "named.template_prune",
];

/// A store refusal as an error object: a taken name is a `conflict`, a running sandbox
/// `sandbox_running` (names are checked before, as `invalid_argument`).
fn refused(e: String) -> Value {
    if e.contains("(conflict)") {
        err("conflict", e)
    } else if e.contains("is running") {
        err("sandbox_running", e)
    } else {
        err("sandbox_error", e)
    }
}

fn name_of(p: &Map<String, Value>) -> Result<String, Value> {
    let name = string(p, "name")?.ok_or_else(|| invalid("name", "missing"))?;
    state::check_name(&name)
        .map_err(|e| invalid("name", e.replacen("sandbox name", "template name", 1)))?;
    Ok(name)
}

/// One template method; `Ok(Value)` is the result to send.
pub fn handle(method: &str, p: &Map<String, Value>) -> Result<Value, Value> {
    match method {
        "named.template_save" => {
            let dir = existing(p)?;
            let name = name_of(p)?;
            template::save_dir(&dir, &dir.name, &name).map_err(refused)?;
            Ok(json!({ "template": name }))
        }
        "named.template_list" => {
            let now = state::now_secs();
            let list: Vec<Value> = template::list()
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name, "from": t.from, "image": t.config.image,
                        "user": t.config.user.as_deref().unwrap_or("root"),
                        "age_s": now.saturating_sub(t.created), "size_bytes": template::size(t),
                        "layers": t.config.layers.len(),
                    })
                })
                .collect();
            Ok(json!({ "templates": list }))
        }
        "named.template_rm" => {
            let name = name_of(p)?;
            let existed = template::find(&name).map_err(refused)?.is_some();
            template::rm(&name).map_err(refused)?;
            Ok(json!({ "removed": existed }))
        }
        "named.template_prune" => {
            // Whole seconds: a template's age is kept in seconds.
            // (`number` refuses a negative or non-finite one; a huge one is every template.)
            let older = number(p, "older_than_s")?.unwrap_or(0.0).ceil();
            let older =
                std::time::Duration::try_from_secs_f64(older).map_or(u64::MAX, |d| d.as_secs());
            let removed = template::prune(older).map_err(|e| err("sandbox_error", e))?;
            Ok(json!({ "removed": removed }))
        }
        other => Err(err(
            "unknown_method",
            format!("unknown method `{other}`; see `hello` for the list"),
        )),
    }
}
