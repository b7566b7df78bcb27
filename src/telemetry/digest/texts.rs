//! The texts the digest table shows (a digest's normalized text and its sample) and the one byte
//! budget they all draw on.
//!
//! A digest's [`Texts`] are made once, by the shard that first sees the digest, and shared by
//! every row of it; sessions keep none (only the digests they have handed over), so what the
//! table's texts cost is bounded whatever the number of sessions. Each made text charges its
//! bytes to the [`TextBudget`] (one relaxed atomic add) and refunds them when its last holder
//! drops it (a row folded, a reset, a pruned shard map), so the budget's count is what the
//! texts hold now. A text that would overspend the budget is not made: its statement counts in
//! its backend's "(other)" row until rows are folded and bytes come back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What a kept text costs besides its bytes: its reference counts and the shard map's entry,
/// rounded up.
pub const OVERHEAD: usize = 96;

/// A digest's normalized text and the sample kept for it, shared by every row of the digest.
#[derive(Debug, Clone)]
pub struct Texts {
    pub text: Arc<str>,
    pub sample: Arc<str>,
    /// What these texts charged to the budget, refunded when the last clone drops.
    _charge: Option<Arc<Charge>>,
}

impl Texts {
    /// Texts charged to no budget (the "(other)" rows' fixed text).
    pub fn fixed(text: &str, sample: &str) -> Self {
        Self {
            text: text.into(),
            sample: sample.into(),
            _charge: None,
        }
    }
}

/// The bytes every kept text of the table holds, against its bound (`digests.max_text_bytes`).
#[derive(Debug)]
pub struct TextBudget {
    used: AtomicUsize,
    max: AtomicUsize,
}

#[derive(Debug)]
struct Charge {
    budget: Arc<TextBudget>,
    bytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl TextBudget {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            used: AtomicUsize::new(0),
            max: AtomicUsize::new(max),
        })
    }

    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    pub fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Bytes the kept texts hold now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Nothing more fits (a text is not even built).
    pub fn spent(&self) -> bool {
        self.used() >= self.max()
    }

    /// `text` and `sample` as kept texts, if their bytes fit in the budget.
    pub fn keep(self: &Arc<Self>, text: String, sample: &[u8]) -> Option<Texts> {
        let sample = String::from_utf8_lossy(sample);
        let bytes = text.len() + sample.len() + OVERHEAD;
        let before = self.used.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > self.max() {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            return None;
        }
        Some(Texts {
            text: text.into(),
            sample: sample.as_ref().into(),
            _charge: Some(Arc::new(Charge {
                budget: Arc::clone(self),
                bytes,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_charge_once_and_refund_when_the_last_clone_drops() {
        let budget = TextBudget::new(1000);
        let t = budget.keep("SELECT ?".into(), b"SELECT 1").unwrap();
        assert_eq!(budget.used(), 16 + OVERHEAD);
        let clones: Vec<Texts> = (0..10).map(|_| t.clone()).collect();
        assert_eq!(budget.used(), 16 + OVERHEAD, "shared, charged once");
        drop(t);
        assert_eq!(budget.used(), 16 + OVERHEAD);
        drop(clones);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_text_past_the_budget_is_not_kept() {
        let budget = TextBudget::new(2 * (100 + OVERHEAD));
        let a = budget.keep("a".repeat(100), b"").unwrap();
        let b = budget.keep("b".repeat(100), b"").unwrap();
        assert!(budget.spent());
        assert!(budget.keep("c".into(), b"").is_none());
        assert_eq!(
            budget.used(),
            2 * (100 + OVERHEAD),
            "a refusal costs nothing"
        );
        drop(a);
        assert!(budget.keep("c".into(), b"").is_some());
        drop(b);
    }
}
