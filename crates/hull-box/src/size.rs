//! Byte sizes in the engine's messages (`64 MiB`). Parsing what callers write (`64m`) is the
//! request model's job (`hull_api::size`).

use std::fmt;

/// Formats bytes for people: `64 MiB`, `1.5 GiB`, `512 B`.
#[derive(Debug, Clone, Copy)]
pub struct Human(pub u64);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut i = 0;
        while v >= 1024.0 && i < UNITS.len() - 1 {
            v /= 1024.0;
            i += 1;
        }
        if i == 0 || (v.fract() == 0.0) {
            write!(f, "{v:.0} {}", UNITS[i])
        } else {
            write!(f, "{v:.1} {}", UNITS[i])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_readable() {
        assert_eq!(Human(64 << 20).to_string(), "64 MiB");
        assert_eq!(Human(1536 << 20).to_string(), "1.5 GiB");
        assert_eq!(Human(10).to_string(), "10 B");
    }
}
