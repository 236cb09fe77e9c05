//! Small robust statistics — the one median of the workspace, the median absolute deviation,
//! block medians and the Theil–Sen slope — used by the doctor's detectors, the data audit and
//! the engine's timings — and the two-sample tests that compare two versions of a dataset.

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

/// The spread of `values` around `center` as a normal sigma, robust to outliers: 1.4826 × their
/// median absolute deviation.
pub fn robust_sigma(values: &[f64], center: f64) -> f64 {
    1.4826 * mad(values, center)
}

/// Robust noise of one point of a series: the MAD of its second differences (a steady trend
/// cancels out), as a normal sigma, over √6 (a second difference carries three points' noise);
/// `None` for fewer than 3 values.
pub fn point_noise(values: &[f64]) -> Option<f64> {
    let d: Vec<f64> = values.windows(3).map(|w| w[2] - 2.0 * w[1] + w[0]).collect();
    let m = median(&d)?;
    Some(robust_sigma(&d, m) / 6f64.sqrt())
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

/// The change along the Theil–Sen line of `y` against `x` over `x`'s span, and its standard
/// error: the robust sigma of the residuals around the line (their MAD as a normal sigma) times
/// √(12 / m) for m points. `None` with fewer than 2 points.
pub fn theil_sen_change(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let slope = theil_sen(x, y)?;
    let (x0, span) = (*x.first()?, x.last()? - x.first()?);
    let resid: Vec<f64> = x.iter().zip(y).map(|(x, y)| y - slope * (x - x0)).collect();
    let sigma = robust_sigma(&resid, median(&resid)?);
    Some((slope * span, sigma * (12.0 / y.len() as f64).sqrt()))
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

/// Pearson's chi-square test that two samples of counts over the same categories come from one
/// distribution: (statistic, degrees of freedom, p-value). Categories empty in both are left
/// out; `None` when fewer than two categories or an empty sample remain.
pub fn chi_square_homogeneity(a: &[u64], b: &[u64]) -> Option<(f64, usize, f64)> {
    use statrs::distribution::{ChiSquared, ContinuousCDF};
    let cells: Vec<(f64, f64)> = a
        .iter()
        .zip(b)
        .filter(|(x, y)| **x + **y > 0)
        .map(|(&x, &y)| (x as f64, y as f64))
        .collect();
    let (na, nb) = cells.iter().fold((0.0, 0.0), |(s, t), (x, y)| (s + x, t + y));
    if cells.len() < 2 || na == 0.0 || nb == 0.0 {
        return None;
    }
    let n = na + nb;
    let stat: f64 = cells
        .iter()
        .map(|&(x, y)| {
            let (ea, eb) = (na * (x + y) / n, nb * (x + y) / n);
            (x - ea).powi(2) / ea + (y - eb).powi(2) / eb
        })
        .sum();
    let dof = cells.len() - 1;
    let p = ChiSquared::new(dof as f64).ok()?.sf(stat);
    Some((stat, dof, p))
}

/// The two-sample Kolmogorov–Smirnov test: (D, the largest gap between the two empirical
/// distribution functions; its asymptotic p-value). Sorts both slices; `None` when one is empty.
pub fn ks_two_sample(a: &mut [f64], b: &mut [f64]) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (n, m) = (a.len() as f64, b.len() as f64);
    let (mut i, mut j, mut d) = (0, 0, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / n - j as f64 / m).abs());
    }
    // The Kolmogorov distribution's tail, with Stephens' small-sample correction.
    let en = (n * m / (n + m)).sqrt();
    let lambda = (en + 0.12 + 0.11 / en) * d;
    let p = if lambda < 0.2 {
        1.0
    } else {
        let tail: f64 = (1..=100)
            .map(|k| {
                let k = k as f64;
                2.0 * (if k as u64 % 2 == 1 { 1.0 } else { -1.0 }) * (-2.0 * k * k * lambda * lambda).exp()
            })
            .sum();
        tail.clamp(0.0, 1.0)
    };
    Some((d, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chi_square_matches_a_textbook_value() {
        // 2x2: [20, 30] against [30, 20]: statistic 4.0, one degree of freedom, p = 0.0455.
        let (stat, dof, p) = chi_square_homogeneity(&[20, 30], &[30, 20]).unwrap();
        assert!(
            (stat - 4.0).abs() < 1e-9 && dof == 1 && (p - 0.0455).abs() < 1e-3,
            "{stat} {p}"
        );
        assert!(chi_square_homogeneity(&[5, 0], &[7, 0]).is_none(), "one category");
        assert!((chi_square_homogeneity(&[10, 20], &[20, 40]).unwrap().2 - 1.0).abs() < 1e-9);
    }

    #[test]
    fn ks_finds_a_shift_and_not_a_copy() {
        let mut a: Vec<f64> = (0..500).map(|i| i as f64).collect();
        let mut b = a.clone();
        let (d, p) = ks_two_sample(&mut a, &mut b).unwrap();
        assert!(d == 0.0 && p == 1.0);
        let mut c: Vec<f64> = (0..500).map(|i| i as f64 + 100.0).collect();
        let (d, p) = ks_two_sample(&mut a, &mut c).unwrap();
        assert!((d - 0.2).abs() < 1e-9 && p < 1e-6, "{d} {p}");
    }

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

    #[test]
    fn theil_sen_change_is_exact_on_a_line_and_reads_the_noise_off_its_residuals() {
        let x: Vec<f64> = (0..20).map(f64::from).collect();
        let line: Vec<f64> = x.iter().map(|x| 3.0 - 0.5 * x).collect();
        assert_eq!(theil_sen_change(&x, &line), Some((-9.5, 0.0)));
        let wiggle: Vec<f64> = line
            .iter()
            .enumerate()
            .map(|(i, y)| y + if i % 2 == 0 { 0.1 } else { -0.1 })
            .collect();
        let (change, se) = theil_sen_change(&x, &wiggle).unwrap();
        assert!((change + 9.5).abs() < 0.25 && se > 0.0, "{change} {se}");
        assert_eq!(theil_sen_change(&x[..1], &line[..1]), None);
    }

    #[test]
    fn point_noise_ignores_a_trend_and_finds_the_wiggle() {
        let trend: Vec<f64> = (0..20).map(|i| 5.0 - 0.1 * f64::from(i)).collect();
        assert!(point_noise(&trend).unwrap() < 1e-12);
        // A pseudo-random ±0.1 wiggle on the trend: about its sigma, 0.1 / √3.
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let noisy: Vec<f64> = (0..2000)
            .map(|i| {
                let t = 5.0 - 0.001 * f64::from(i);
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                t + 0.2 * ((state >> 11) as f64 / (1u64 << 53) as f64 - 0.5)
            })
            .collect();
        let sigma = point_noise(&noisy).unwrap();
        assert!((0.04..0.08).contains(&sigma), "{sigma}");
        assert_eq!(point_noise(&[1.0, 2.0]), None);
    }
}
