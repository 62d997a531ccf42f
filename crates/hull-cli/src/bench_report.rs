//! The samples `hull bench --sdk` and `--peers` collect, and their statistics: per side (bare,
//! an SDK, a peer), workload and spacing, the sample count, min, p50 and p90, and the ratios
//! between two sides. The drivers only time calls; every figure is computed here.

use serde_json::{json, Value};

use crate::bench_stats::quantile;

/// How calls are spaced: `Agent` waits between calls as an agent loop does (a model thinks
/// between tool calls; a warm pool refills meanwhile), `BackToBack` does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spacing {
    Agent,
    BackToBack,
}

impl Spacing {
    /// The gap before each timed call.
    pub fn gap(self) -> std::time::Duration {
        match self {
            Spacing::Agent => std::time::Duration::from_millis(50),
            Spacing::BackToBack => std::time::Duration::ZERO,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Spacing::Agent => "agent",
            Spacing::BackToBack => "back_to_back",
        }
    }
}

/// One side's figures for one workload and spacing, in milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    pub side: String,
    pub workload: String,
    pub spacing: Spacing,
    pub n: usize,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
}

impl Stat {
    /// `self` over `base`: (p50 ratio, p90 ratio).
    pub fn ratio_to(&self, base: &Stat) -> (f64, f64) {
        (self.p50 / base.p50, self.p90 / base.p90)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "side": self.side, "workload": self.workload, "spacing": self.spacing.name(),
            "n": self.n, "min": self.min, "p50": self.p50, "p90": self.p90,
        })
    }
}

/// Timings in the order they were first recorded (so the report lists sides and workloads in
/// the order the bench ran them).
#[derive(Debug, Default)]
pub struct Samples {
    sets: Vec<(String, String, Spacing, Vec<f64>)>,
}

impl Samples {
    pub fn push(&mut self, side: &str, workload: &str, spacing: Spacing, ms: f64) {
        match self
            .sets
            .iter_mut()
            .find(|s| s.0 == side && s.1 == workload && s.2 == spacing)
        {
            Some(s) => s.3.push(ms),
            None => self
                .sets
                .push((side.to_string(), workload.to_string(), spacing, vec![ms])),
        }
    }

    /// Every non-empty set's statistics.
    pub fn stats(&self) -> Vec<Stat> {
        self.sets
            .iter()
            .filter(|s| !s.3.is_empty())
            .map(|(side, workload, spacing, v)| {
                let mut v = v.clone();
                Stat {
                    side: side.clone(),
                    workload: workload.clone(),
                    spacing: *spacing,
                    n: v.len(),
                    min: quantile(&mut v, 0.0),
                    p50: quantile(&mut v, 0.5),
                    p90: quantile(&mut v, 0.9),
                }
            })
            .collect()
    }
}

/// The stat of `side`/`workload`/`spacing` among `stats`.
pub fn find<'a>(
    stats: &'a [Stat],
    side: &str,
    workload: &str,
    spacing: Spacing,
) -> Option<&'a Stat> {
    stats
        .iter()
        .find(|s| s.side == side && s.workload == workload && s.spacing == spacing)
}

/// The 1, 5 and 15 minute load averages, or zeros where /proc/loadavg cannot be read.
pub fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    parse_loadavg(&text)
}

fn parse_loadavg(text: &str) -> [f64; 3] {
    let mut out = [0.0; 3];
    for (slot, field) in out.iter_mut().zip(text.split_whitespace()) {
        *slot = field.parse().unwrap_or(0.0);
    }
    out
}

/// A side or workload left out, and why.
pub fn skipped(side: &str, workload: Option<&str>, why: &str) -> Value {
    json!({ "side": side, "workload": workload, "why": why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_group_by_side_workload_and_spacing_in_first_seen_order() {
        let mut s = Samples::default();
        for ms in [3.0, 1.0, 2.0] {
            s.push("python", "prewarm", Spacing::Agent, ms);
        }
        s.push("bare", "python3", Spacing::Agent, 10.0);
        s.push("python", "prewarm", Spacing::BackToBack, 7.0);
        let st = s.stats();
        assert_eq!(st.len(), 3);
        assert_eq!(
            (
                st[0].side.as_str(),
                st[0].n,
                st[0].min,
                st[0].p50,
                st[0].p90
            ),
            ("python", 3, 1.0, 2.0, 3.0)
        );
        assert_eq!(st[1].side, "bare");
        assert_eq!(st[2].spacing, Spacing::BackToBack);
        let py = find(&st, "python", "prewarm", Spacing::Agent).unwrap();
        let bare = find(&st, "bare", "python3", Spacing::Agent).unwrap();
        assert_eq!(py.ratio_to(bare), (0.2, 0.3));
        assert!(find(&st, "node", "prewarm", Spacing::Agent).is_none());
    }

    #[test]
    fn p90_is_never_below_p50() {
        let mut s = Samples::default();
        for ms in [9.0, 0.5, 4.0, 4.0, 100.0, 3.0, 2.5] {
            s.push("a", "w", Spacing::Agent, ms);
        }
        let st = &s.stats()[0];
        assert!(st.min <= st.p50 && st.p50 <= st.p90, "{st:?}");
        assert_eq!((st.p50, st.p90), (4.0, 9.0));
    }

    #[test]
    fn load_average_fields() {
        assert_eq!(
            parse_loadavg("1.03 0.30 0.11 2/345 6789\n"),
            [1.03, 0.30, 0.11]
        );
        assert_eq!(parse_loadavg(""), [0.0; 3]);
    }
}
