//! Weighted round robin, interleaved: weights 3:1 give `A B A A`, not `A A A B`, so a burst of
//! connections still alternates between backends.
//!
//! The position in the cycle comes from one shared counter and the pick is computed from it
//! (no lock, no per-backend state), so the up set may change between two picks: the cycle simply
//! continues over the new set. Round `r` of the cycle holds, in configuration order, every
//! backend whose weight exceeds `r`; the cycle is as long as the sum of the weights.

/// The index (into `weights`) for position `counter` of the cycle. `weights` must not be empty;
/// zero weights count as one.
pub fn pick(weights: &[u32], counter: usize) -> usize {
    // Equal weights (the usual case, and every transaction of a pool across backends asks):
    // the cycle is the backends in order.
    if let Some((&first, rest)) = weights.split_first() {
        if rest.iter().all(|&w| w.max(1) == first.max(1)) {
            return counter % weights.len();
        }
    }
    let total: u64 = weights.iter().map(|&w| u64::from(w.max(1))).sum();
    if total == 0 {
        return 0;
    }
    let p = counter as u64 % total;
    // before(r) = slots in rounds 0..r = Σ min(w, r), non-decreasing in r. Find the round holding
    // slot p: the largest r with before(r) <= p.
    let before = |r: u64| -> u64 { weights.iter().map(|&w| u64::from(w.max(1)).min(r)).sum() };
    let max_weight = weights
        .iter()
        .map(|&w| u64::from(w.max(1)))
        .max()
        .unwrap_or(1);
    let (mut lo, mut hi) = (0u64, max_weight);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if before(mid) <= p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let round = lo;
    let mut k = p - before(round);
    for (i, &w) in weights.iter().enumerate() {
        if u64::from(w.max(1)) > round {
            if k == 0 {
                return i;
            }
            k -= 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::pick;

    fn cycle(weights: &[u32]) -> Vec<usize> {
        let total: u32 = weights.iter().sum();
        (0..total as usize).map(|c| pick(weights, c)).collect()
    }

    #[test]
    fn equal_weights_take_turns() {
        assert_eq!(cycle(&[1, 1, 1]), [0, 1, 2]);
        assert_eq!(cycle(&[2, 2]), [0, 1, 0, 1]);
    }

    #[test]
    fn weights_interleave_rather_than_bunch() {
        assert_eq!(cycle(&[3, 1]), [0, 1, 0, 0]);
        assert_eq!(cycle(&[1, 3]), [0, 1, 1, 1]);
        assert_eq!(cycle(&[3, 2, 1]), [0, 1, 2, 0, 1, 0]);
    }

    #[test]
    fn each_cycle_honours_the_weights_exactly() {
        let weights = [5, 1, 3, 7];
        let mut counts = [0; 4];
        for c in 0..16 * 10 {
            counts[pick(&weights, c)] += 1;
        }
        assert_eq!(counts, [50, 10, 30, 70]);
    }

    #[test]
    fn huge_weights_and_counter_wrap_stay_in_range() {
        let weights = [u32::MAX, 1, u32::MAX];
        for c in [0, 1, usize::MAX, usize::MAX / 2, 12_345_678] {
            assert!(pick(&weights, c) < 3);
        }
        assert_eq!(pick(&[7], usize::MAX), 0);
    }
}
