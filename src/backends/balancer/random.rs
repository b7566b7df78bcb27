//! Weighted random choice. The generator is SplitMix64 over one atomic counter: lock-free, good
//! enough statistics for spreading connections, and no dependency.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A shared pseudo-random sequence (not for anything secret).
#[derive(Debug)]
pub struct Rng(AtomicU64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(AtomicU64::new(seed))
    }

    /// Seeded from the clock and a process-wide sequence, so two sets do not move in lockstep.
    pub fn from_entropy() -> Self {
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let n = SEQUENCE.fetch_add(1, Relaxed);
        Self::new(clock ^ n.wrapping_mul(GAMMA).rotate_left(17))
    }

    pub fn next_u64(&self) -> u64 {
        let mut z = self.0.fetch_add(GAMMA, Relaxed).wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The index chosen for the random value `r`, each with probability weight / Σ weights. `weights`
/// must not be empty; zero weights count as one.
pub fn pick(weights: &[u32], r: u64) -> usize {
    let total: u64 = weights.iter().map(|&w| u64::from(w.max(1))).sum();
    if total == 0 {
        return 0;
    }
    let mut x = r % total;
    for (i, &w) in weights.iter().enumerate() {
        let w = u64::from(w.max(1));
        if x < w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_map_to_weighted_ranges() {
        let w = [3, 1];
        let picks: Vec<_> = (0..8).map(|r| pick(&w, r)).collect();
        assert_eq!(picks, [0, 0, 0, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn sequence_spreads_by_weight() {
        let rng = Rng::new(42);
        let mut counts = [0u32; 3];
        for _ in 0..60_000 {
            counts[pick(&[1, 2, 3], rng.next_u64())] += 1;
        }
        for (i, expected) in [10_000, 20_000, 30_000].into_iter().enumerate() {
            let diff = counts[i].abs_diff(expected);
            assert!(diff < 800, "{counts:?}");
        }
    }

    #[test]
    fn seeded_generators_differ() {
        let a = Rng::from_entropy();
        let b = Rng::from_entropy();
        assert_ne!(
            (0..4).map(|_| a.next_u64()).collect::<Vec<_>>(),
            (0..4).map(|_| b.next_u64()).collect::<Vec<_>>()
        );
    }
}
