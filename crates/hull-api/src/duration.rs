//! Durations as callers write them: `30s`, `500ms`, `2m`, `1h` or a bare number of seconds in
//! text (`hull run --timeout`, `run`'s `timeout`), or a JSON number of seconds (`timeout_s`).
//! Every one is more than zero and at most seven days.

use std::time::Duration;

use serde::de::{Deserializer, Error as _};
use serde::Deserialize;

/// The longest deadline any front end accepts.
pub const MAX: Duration = Duration::from_secs(7 * 86400);

/// The shortest.
pub const MIN: Duration = Duration::from_millis(1);

/// Why a duration was refused; the message says what a valid one looks like.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is not a duration; write e.g. 30s, 500ms or 2m")]
    Malformed(String),
    #[error("`{0}` has an unknown unit `{1}`; use ms, s, m or h")]
    UnknownUnit(String, String),
    #[error("`{0}` must be between 1ms and 7 days")]
    OutOfRange(String),
    #[error("{0} must be at least 0.001 (1 ms) and at most 7 days (604800)")]
    Seconds(f64),
}

/// Parses `30s`, `500ms`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| DurationError::Malformed(text.to_string()))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(DurationError::UnknownUnit(
                text.to_string(),
                unit.to_string(),
            ))
        }
    };
    // At least 1 ms, as the message says: shorter is no use as a deadline, and under 1 ns it
    // would round to a zero deadline.
    if !secs.is_finite() || !(MIN.as_secs_f64()..=MAX.as_secs_f64()).contains(&secs) {
        return Err(DurationError::OutOfRange(text.to_string()));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A number of seconds: at least 1 ms, at most 7 days.
pub fn from_seconds(s: f64) -> Result<Duration, DurationError> {
    if !(s.is_finite() && (MIN.as_secs_f64()..=MAX.as_secs_f64()).contains(&s)) {
        return Err(DurationError::Seconds(s));
    }
    Ok(Duration::from_secs_f64(s))
}

/// A JSON number of seconds (`timeout_s`).
pub fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = f64::deserialize(d).map_err(|_| D::Error::custom("expected a number of seconds"))?;
    from_seconds(s).map_err(D::Error::custom)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SecondsOrText {
    Seconds(f64),
    Text(String),
}

/// Seconds as a number or a duration in text (`"2s"`); empty text means `default`.
pub fn seconds_or_text<'de, D: Deserializer<'de>>(
    d: D,
    default: Duration,
) -> Result<Duration, D::Error> {
    match SecondsOrText::deserialize(d)
        .map_err(|_| D::Error::custom("give seconds (a number) or a duration string like \"2s\""))?
    {
        SecondsOrText::Seconds(s) => from_seconds(s).map_err(D::Error::custom),
        SecondsOrText::Text(t) if t.is_empty() => Ok(default),
        SecondsOrText::Text(t) => parse_duration(&t).map_err(D::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(matches!(
            parse_duration("2x"),
            Err(DurationError::UnknownUnit(..))
        ));
        assert!(matches!(
            parse_duration("0"),
            Err(DurationError::OutOfRange(_))
        ));
        assert!(matches!(
            parse_duration("soon"),
            Err(DurationError::Malformed(_))
        ));
        assert!(from_seconds(0.0).is_err() && from_seconds(f64::NAN).is_err());
        assert_eq!(from_seconds(0.5), Ok(Duration::from_millis(500)));
    }

    #[test]
    fn durations_under_a_millisecond_are_refused_as_the_message_says() {
        // The fuzzer's find: 0.000...025112 minutes parsed as a zero deadline.
        for t in ["00000.000000000000000000025112m", "0.5ms", "0.0009s"] {
            assert!(
                matches!(parse_duration(t), Err(DurationError::OutOfRange(_))),
                "{t}"
            );
        }
        assert_eq!(parse_duration("1ms"), Ok(Duration::from_millis(1)));
        assert!(from_seconds(1e-12).is_err() && from_seconds(0.0005).is_err());
        assert_eq!(from_seconds(0.001), Ok(Duration::from_millis(1)));
    }
}
