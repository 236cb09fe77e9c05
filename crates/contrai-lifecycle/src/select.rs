//! Which entries a pruning mask keeps: the one implementation of the selection both engines call
//! (the Burn engine directly, the PyTorch engine through `_core`), on plain scores — no tensors.
//!
//! | rule | function |
//! | --- | --- |
//! | a module loses `floor(share × entries)` entries, never fewer than are masked already (a masked entry scores −1 and stays masked) | [`count`] |
//! | per module: the threshold is the module's `count`-th smallest score | [`thresholds`] with [`PruneScope::Module`] |
//! | global: one threshold over the free modules removes the total the targets ask; a module it would push past its cap is held at the cap, the rest shared again (water-filling) | [`thresholds`] with [`PruneScope::Global`] |
//! | an entry is kept when its score is ≥ 0 and above its module's threshold | [`keeps`] |
//! | whole groups (heads, units): `floor(share × groups)` groups go, never fewer than are dead already, dead ones first, then the smallest L2 norm, then the lowest index | [`weakest_groups`] |

use contrai_recipe::PruneScope;

use crate::protocol::Target;

/// Entries to prune for share `share` of `scores` (never fewer than are masked already).
pub fn count(scores: &[f32], share: f64) -> usize {
    let masked = scores.iter().filter(|s| **s < 0.0).count();
    (((scores.len() as f64) * share).floor() as usize).max(masked)
}

/// The `k`-th smallest score (−∞ for k = 0): entries at or below it are pruned.
pub fn kth(scores: impl Iterator<Item = f32>, k: usize) -> f32 {
    let mut s: Vec<f32> = scores.collect();
    let k = k.min(s.len());
    if k == 0 {
        return f32::NEG_INFINITY;
    }
    *s.select_nth_unstable_by(k - 1, f32::total_cmp).1
}

/// Whether an entry of score `score` stays under `threshold`.
pub fn keeps(score: f32, threshold: f32) -> bool {
    score >= 0.0 && score > threshold
}

/// The threshold of each module (`pools`: its scores, masked entries −1, and its target).
pub fn thresholds(pools: &[(&[f32], Target)], scope: PruneScope) -> Vec<f32> {
    match scope {
        PruneScope::Module => pools
            .iter()
            .map(|(s, t)| kth(s.iter().copied(), count(s, t.share())))
            .collect(),
        PruneScope::Global => global_thresholds(pools),
    }
}

/// Water-filling: one threshold over the free modules removes the total the targets ask for; a
/// module it would push past its cap is held at the cap, and the rest is shared again.
fn global_thresholds(pools: &[(&[f32], Target)]) -> Vec<f32> {
    let total: usize = pools.iter().map(|(s, t)| count(s, t.share())).sum();
    let at_cap = |i: usize| count(pools[i].0, pools[i].1.cap.min(1.0));
    let mut held: Vec<Option<usize>> = vec![None; pools.len()];
    loop {
        let fixed: usize = held.iter().flatten().sum();
        let free: Vec<usize> = (0..pools.len()).filter(|&i| held[i].is_none()).collect();
        let t = kth(
            free.iter().flat_map(|&i| pools[i].0.iter().copied()),
            total.saturating_sub(fixed),
        );
        let over: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&i| pools[i].0.iter().filter(|s| **s <= t).count() > at_cap(i))
            .collect();
        if over.is_empty() {
            return (0..pools.len())
                .map(|i| held[i].map_or(t, |c| kth(pools[i].0.iter().copied(), c)))
                .collect();
        }
        for i in over {
            held[i] = Some(at_cap(i));
        }
    }
}

/// Keep flags of every module's entries (`pools` as for [`thresholds`]).
pub fn magnitude_masks(pools: &[(&[f32], Target)], scope: PruneScope) -> Vec<Vec<bool>> {
    pools
        .iter()
        .zip(thresholds(pools, scope))
        .map(|((s, _), t)| s.iter().map(|&x| keeps(x, t)).collect())
        .collect()
}

/// Which groups of one structure go (true: pruned), from each group's L2 norm over all its
/// matrices and whether it is dead already (every entry masked).
pub fn weakest_groups(norm: &[f64], dead: &[bool], target: Target) -> Vec<bool> {
    let groups = norm.len();
    let n =
        ((target.share() * groups as f64 + 1e-9).floor() as usize).max(dead.iter().filter(|d| **d).count());
    let mut order: Vec<usize> = (0..groups).collect();
    order.sort_by(|&a, &b| {
        dead[b]
            .cmp(&dead[a])
            .then(norm[a].total_cmp(&norm[b]))
            .then(a.cmp(&b))
    });
    let mut pruned = vec![false; groups];
    for &g in &order[..n.min(groups)] {
        pruned[g] = true;
    }
    pruned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_global_threshold_holds_a_capped_module_and_shares_the_rest() {
        let small: Vec<f32> = (1..=10).map(|i| i as f32 / 100.0).collect();
        let large: Vec<f32> = (1..=10).map(|i| i as f32).collect();
        let capped = Target {
            sparsity: 0.5,
            cap: 0.6,
        };
        let pools = [(&small[..], capped), (&large[..], Target::uncapped(0.5))];
        let masks = magnitude_masks(&pools, PruneScope::Global);
        let zeros = |m: &Vec<bool>| m.iter().filter(|k| !**k).count();
        assert_eq!(
            (zeros(&masks[0]), zeros(&masks[1])),
            (6, 4),
            "held at its cap, the rest elsewhere"
        );
        let per = magnitude_masks(&pools, PruneScope::Module);
        assert_eq!((zeros(&per[0]), zeros(&per[1])), (5, 5));
    }

    #[test]
    fn masked_entries_stay_masked_and_dead_groups_go_first() {
        let scores = [-1.0, 0.5, 0.2, 0.9];
        assert_eq!(
            magnitude_masks(&[(&scores[..], Target::uncapped(0.0))], PruneScope::Module)[0],
            [false, true, true, true]
        );
        let pruned = weakest_groups(
            &[0.0, 3.0, 1.0, 2.0],
            &[true, false, false, false],
            Target::uncapped(0.5),
        );
        assert_eq!(pruned, [true, false, true, false]);
        assert_eq!(
            weakest_groups(&[1.0, 2.0], &[false, false], Target::uncapped(0.4)),
            [false, false]
        );
    }
}
