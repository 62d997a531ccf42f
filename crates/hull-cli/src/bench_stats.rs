//! The statistics every `hull bench` mode reports: quantiles of a list of timings. A leaf
//! module, so the bench modes share it without importing one another.

/// The `q` quantile (0 to 1) of `v`, a non-empty list of timings; sorts `v`.
pub(crate) fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    // index into a non-empty slice
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

/// min, median, p90 of milliseconds.
pub(crate) fn summary(v: &mut [f64]) -> (f64, f64, f64) {
    (quantile(v, 0.0), quantile(v, 0.5), quantile(v, 0.9))
}

#[cfg(test)]
mod tests {
    #[test]
    fn quantiles_of_timings() {
        let mut v = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 9.0, 8.0, 7.0, 6.0, 11.0];
        assert_eq!(super::summary(&mut v), (1.0, 6.0, 10.0));
    }
}
