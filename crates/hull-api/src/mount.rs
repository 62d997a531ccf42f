//! Host directories bound into a box (`SRC:DST[:ro|rw]`, or `{source, target, read_only}` in
//! JSON) and extra tmpfs mounts (`PATH=SIZE`, or `{path: size}` in `sandbox.create`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;

use serde::de::{Deserializer, Error as _};
use serde::Deserialize;

use crate::size::{self, SizeError};

/// A host path bound into the box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
}

/// A tmpfs mounted in the box.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tmpfs {
    pub target: String,
    pub size: u64,
}

/// Why a mount or tmpfs was refused as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    #[error("`{0}`: write it as SRC:DST or SRC:DST:ro")]
    Shape(String),
    #[error("`{0}`: mode `{1}` must be ro or rw")]
    Mode(String, String),
    #[error("`{0}`: both the source and the target are needed")]
    Empty(String),
    #[error("`{0}`: write it as PATH=SIZE, e.g. /cache=128m")]
    TmpfsShape(String),
    #[error("`{target}`")]
    TmpfsSize {
        target: String,
        #[source]
        source: SizeError,
    },
}

impl FromStr for Mount {
    type Err = MountError;

    /// `SRC:DST`, `SRC:DST:ro` or `SRC:DST:rw` (read-write is the default).
    fn from_str(m: &str) -> Result<Mount, MountError> {
        let parts: Vec<&str> = m.split(':').collect();
        let (src, dst, read_only) = match parts.as_slice() {
            [s, d] => (*s, *d, false),
            [s, d, "ro"] => (*s, *d, true),
            [s, d, "rw"] => (*s, *d, false),
            [_, _, mode] => return Err(MountError::Mode(m.into(), (*mode).into())),
            _ => return Err(MountError::Shape(m.into())),
        };
        Mount::new(src, dst, read_only, m)
    }
}

impl Mount {
    fn new(src: &str, dst: &str, read_only: bool, shown: &str) -> Result<Mount, MountError> {
        if src.is_empty() || dst.is_empty() {
            return Err(MountError::Empty(shown.into()));
        }
        Ok(Mount {
            source: PathBuf::from(src),
            target: dst.to_string(),
            read_only,
        })
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum MountForm {
    Text(String),
    Object {
        source: Option<String>,
        target: Option<String>,
        read_only: Option<serde_json::Value>,
    },
}

impl<'de> Deserialize<'de> for Mount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Mount, D::Error> {
        let want = "\"SRC:DST[:ro]\" strings or {source, target, read_only} objects";
        match MountForm::deserialize(d).map_err(|_| D::Error::custom(format!("expected {want}")))? {
            MountForm::Text(s) => s.parse().map_err(D::Error::custom),
            MountForm::Object {
                source,
                target,
                read_only,
            } => {
                let (Some(src), Some(dst)) = (source, target) else {
                    return Err(D::Error::custom(
                        "a mount object needs \"source\" and \"target\" strings",
                    ));
                };
                let read_only = match read_only {
                    None => false,
                    Some(serde_json::Value::Bool(b)) => b,
                    Some(v) => {
                        return Err(D::Error::custom(format!(
                            "read_only: expected true or false, got {v}"
                        )))
                    }
                };
                Mount::new(&src, &dst, read_only, &format!("{src}:{dst}")).map_err(D::Error::custom)
            }
        }
    }
}

impl FromStr for Tmpfs {
    type Err = MountError;

    /// `PATH=SIZE`, the size with a unit (`/cache=128m`).
    fn from_str(t: &str) -> Result<Tmpfs, MountError> {
        let (target, size) = t
            .split_once('=')
            .ok_or_else(|| MountError::TmpfsShape(t.into()))?;
        let size = size::parse_size(size).map_err(|source| MountError::TmpfsSize {
            target: target.into(),
            source,
        })?;
        Ok(Tmpfs {
            target: target.into(),
            size,
        })
    }
}

impl<'de> Deserialize<'de> for Tmpfs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Tmpfs, D::Error> {
        let s = String::deserialize(d)
            .map_err(|_| D::Error::custom("expected \"PATH=SIZE\" strings"))?;
        s.parse()
            .map_err(|e| D::Error::custom(crate::error::Chain(&e)))
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TmpfsForm {
    Map(BTreeMap<String, serde_json::Value>),
    List(Vec<serde_json::Value>),
}

/// `{path: size}` (a size in MiB or with a unit) or a list of `"PATH=SIZE"`, or `null`.
pub fn tmpfs_map_or_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Tmpfs>, D::Error> {
    let want = "a {path: size} mapping or a list of \"PATH=SIZE\"";
    let form = Option::<TmpfsForm>::deserialize(d)
        .map_err(|_| D::Error::custom(format!("expected {want}")))?;
    match form {
        None => Ok(Vec::new()),
        Some(TmpfsForm::Map(m)) => m
            .into_iter()
            .map(|(target, v)| {
                let size = size::mib_or_text(v)
                    .map_err(|e| D::Error::custom(format!("`{target}`: {e}")))?;
                Ok(Tmpfs { target, size })
            })
            .collect(),
        Some(TmpfsForm::List(l)) => l
            .into_iter()
            .map(|v| Tmpfs::deserialize(v).map_err(D::Error::custom))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mounts_parse_from_text_and_objects() {
        let m: Mount = "/a:/b:ro".parse().unwrap();
        assert_eq!(
            (m.source.to_str(), m.target.as_str(), m.read_only),
            (Some("/a"), "/b", true)
        );
        assert!(!"/a:/b".parse::<Mount>().unwrap().read_only);
        assert!(matches!(
            "/a:/b:rx".parse::<Mount>(),
            Err(MountError::Mode(..))
        ));
        assert!(matches!("/a".parse::<Mount>(), Err(MountError::Shape(_))));
        assert!(matches!(":/b".parse::<Mount>(), Err(MountError::Empty(_))));
        let m: Mount = serde_json::from_value(json!({"source": "/c", "target": "/d"})).unwrap();
        assert!(!m.read_only && m.target == "/d");
        let e = serde_json::from_value::<Mount>(json!({"source": "/c"})).unwrap_err();
        assert!(e.to_string().contains("\"source\" and \"target\""), "{e}");
        let e = serde_json::from_value::<Mount>(
            json!({"source": "/c", "target": "/d", "read_only": 1}),
        );
        assert!(e.unwrap_err().to_string().contains("read_only"));
    }

    #[test]
    fn tmpfs_forms() {
        let t: Tmpfs = "/cache=8m".parse().unwrap();
        assert_eq!(t.size, 8 << 20);
        let e = "/cache=8".parse::<Tmpfs>().unwrap_err();
        assert!(matches!(e, MountError::TmpfsSize { .. }));
        let v = tmpfs_map_or_list(json!({"/cache": "8m", "/x": 4})).unwrap();
        assert!(v.contains(&Tmpfs {
            target: "/cache".into(),
            size: 8 << 20
        }));
        assert!(v.contains(&Tmpfs {
            target: "/x".into(),
            size: 4 << 20
        }));
        assert_eq!(
            tmpfs_map_or_list(json!(["/y=1m"])).unwrap()[0].size,
            1 << 20
        );
        assert!(tmpfs_map_or_list(json!(null)).unwrap().is_empty());
        let e = tmpfs_map_or_list(json!(["/y=1"])).unwrap_err().to_string();
        assert!(e.contains("/y") && e.contains("unit"), "{e}");
    }
}
