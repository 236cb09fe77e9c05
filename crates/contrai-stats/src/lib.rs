//! Small robust statistics — the one median of the workspace, the median absolute deviation,
//! block medians and the Theil–Sen slope — used by the doctor's detectors, the data audit and
//! the engine's timings.

#![warn(missing_docs)]

/// Median of a slice (NaN-free input expected); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = values.to_vec();
    Some(median_in_place(&mut v))
}

/// Median of a non-empty mutable buffer, reordering it.
pub fn median_in_place(v: &mut [f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    let mid = n / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    let hi = *m;
    if n % 2 == 1 {
        hi
    } else {
        let lo = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo + hi) / 2.0
    }
}

/// Median absolute deviation around `center`.
pub fn mad(values: &[f64], center: f64) -> f64 {
    let mut d: Vec<f64> = values.iter().map(|v| (v - center).abs()).collect();
    median_in_place(&mut d)
}

/// Median of consecutive blocks so that at most `max_blocks` values remain.
pub fn block_medians(values: &[f64], max_blocks: usize) -> Vec<f64> {
    if values.len() <= max_blocks || max_blocks == 0 {
        return values.to_vec();
    }
    let size = values.len().div_ceil(max_blocks);
    values
        .chunks(size)
        .map(|c| {
            let mut b = c.to_vec();
            median_in_place(&mut b)
        })
        .collect()
}

/// Theil–Sen slope of `y` against `x` (median of pairwise slopes); `None` with < 2 points.
pub fn theil_sen(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len().min(y.len());
    let mut slopes = Vec::with_capacity(n * n.saturating_sub(1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            let dx = x[j] - x[i];
            if dx != 0.0 {
                slopes.push((y[j] - y[i]) / dx);
            }
        }
    }
    if slopes.is_empty() {
        None
    } else {
        Some(median_in_place(&mut slopes))
    }
}

/// Median of the differences between consecutive values (a log's cadence).
pub fn median_gap(steps: &[u64]) -> f64 {
    let gaps: Vec<f64> = steps
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0]) as f64)
        .filter(|g| *g > 0.0)
        .collect();
    median(&gaps).unwrap_or(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0, 100.0], 3.0), 1.0);
        assert_eq!(block_medians(&[1.0, 2.0, 3.0, 4.0], 2), vec![1.5, 3.5]);
        let s = theil_sen(&[0.0, 1.0, 2.0, 3.0, 4.0], &[0.0, 2.0, 4.0, 6.0, 100.0]).unwrap_or(0.0);
        assert_eq!(s, 2.0);
        assert_eq!(median_gap(&[0, 50, 100, 150]), 50.0);
    }
}
