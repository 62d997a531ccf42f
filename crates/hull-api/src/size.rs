//! Byte sizes as callers write them (`64m`, `1GiB`, `512k`). A bare number in text is refused:
//! "64" could mean bytes or megabytes, and a sandbox limit read the wrong way is a silent hole.
//! Where a protocol field takes a number, its name carries the unit (`memory_mb`,
//! `max_output_bytes`), and the serde helpers here read it in that unit.

use serde::de::{Deserializer, Error as _};
use serde::Deserialize;

/// Why a size string was refused; the message says what a valid size looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("size `{0}` has no unit; write it with one, e.g. `{0}m` (MiB), `{0}k` (KiB) or `{0}g` (GiB)")]
    NoUnit(String),
    #[error("size `{0}` is not a number followed by a unit (b, k, m, g, t; e.g. `64m`, `1GiB`)")]
    Malformed(String),
    #[error(
        "size `{0}` has an unknown unit `{1}`; use b, k, m, g or t (KiB, MiB, ... also accepted)"
    )]
    UnknownUnit(String, String),
    #[error("size `{0}` is too large")]
    Overflow(String),
    #[error("size `{0}` is zero; give a positive size")]
    Zero(String),
}

/// Parses a size with a mandatory binary unit (k = KiB = 1024 bytes).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(SizeError::Malformed(text.to_string()));
    }
    if unit.is_empty() {
        return Err(SizeError::NoUnit(text.to_string()));
    }
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(SizeError::UnknownUnit(text.to_string(), unit.to_string())),
    };
    let value = if num.contains('.') {
        let f: f64 = num
            .parse()
            .map_err(|_| SizeError::Malformed(text.to_string()))?;
        let bytes = f * mult as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(SizeError::Overflow(text.to_string()));
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        // checked finite, positive and in range
        let b = bytes as u64;
        b
    } else {
        let n: u64 = num
            .parse()
            .map_err(|_| SizeError::Overflow(text.to_string()))?;
        n.checked_mul(mult)
            .ok_or_else(|| SizeError::Overflow(text.to_string()))?
    };
    if value == 0 {
        return Err(SizeError::Zero(text.to_string()));
    }
    Ok(value)
}

/// A size given as text with a unit (`"64m"`); numbers are refused (which unit would they be?).
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d)?;
    parse_size(&s).map_err(D::Error::custom)
}

/// [`text`], or `null` for none.
pub fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| parse_size(&s).map_err(D::Error::custom))
        .transpose()
}

/// A size in MiB given as a number, or as text with a unit (`"64m"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum MibOrText {
    Mib(u64),
    Text(String),
}

/// Bytes from a number of MiB or a string with a unit (the SDKs' tmpfs sizes).
pub fn mib_or_text<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match MibOrText::deserialize(d)
        .map_err(|_| D::Error::custom("expected a size in MiB or a string like \"64m\""))?
    {
        // Checked as a written size is: zero would be a tmpfs without any limit (`size=0`).
        MibOrText::Mib(0) => Err(D::Error::custom("a size of 0 MiB; give a positive size")),
        MibOrText::Mib(mb) => mb
            .checked_mul(1 << 20)
            .ok_or_else(|| D::Error::custom(format!("{mb} MiB is too large"))),
        MibOrText::Text(s) => parse_size(&s).map_err(D::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    struct Mib {
        #[serde(deserialize_with = "mib_or_text")]
        size: u64,
    }

    #[test]
    fn numeric_sizes_are_checked_like_written_ones() {
        // A tmpfs of 0 bytes would be mounted with no limit at all (`size=0`); MiB past 2^44 do
        // not fit in bytes.
        let parse = |v: serde_json::Value| serde_json::from_value::<Mib>(v).map(|m| m.size);
        assert!(parse(serde_json::json!({"size": 0})).is_err());
        assert!(parse(serde_json::json!({"size": 1u64 << 44})).is_err());
        assert_eq!(parse(serde_json::json!({"size": 8})).unwrap(), 8 << 20);
        assert!(parse(serde_json::json!({"size": "0m"})).is_err());
    }

    use super::*;

    #[test]
    fn units_are_binary() {
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("100b"), Ok(100));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
    }

    #[test]
    fn bare_numbers_and_junk_are_refused() {
        assert!(matches!(parse_size("64"), Err(SizeError::NoUnit(_))));
        assert!(parse_size("64").unwrap_err().to_string().contains("64m"));
        assert!(matches!(parse_size("m"), Err(SizeError::Malformed(_))));
        assert!(matches!(parse_size("5x"), Err(SizeError::UnknownUnit(..))));
        assert!(matches!(parse_size("0m"), Err(SizeError::Zero(_))));
        assert!(matches!(
            parse_size("99999999999999999999t"),
            Err(SizeError::Overflow(_))
        ));
    }
}
