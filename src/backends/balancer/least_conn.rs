//! Least connections, weighted: the backend with the fewest active sessions per unit of weight.
//!
//! Ties are broken by a rotating start so that a burst of clients arriving together (all seeing
//! the same counts, since a session is counted only once its backend greeted) is spread rather
//! than piled onto the first backend.

/// The index of the least loaded of `loads` (`(active sessions, weight)`), scanning from
/// `counter % len` so equal loads take turns. `loads` must not be empty.
pub fn pick(loads: &[(usize, u32)], counter: usize) -> usize {
    let n = loads.len();
    if n == 0 {
        return 0;
    }
    let start = counter % n;
    let mut best = start;
    for k in 1..n {
        let i = (start + k) % n;
        if lighter(loads[i], loads[best]) {
            best = i;
        }
    }
    best
}

/// a.active / a.weight < b.active / b.weight, without division.
fn lighter((a_active, a_weight): (usize, u32), (b_active, b_weight): (usize, u32)) -> bool {
    let a = a_active as u128 * u128::from(b_weight.max(1));
    let b = b_active as u128 * u128::from(a_weight.max(1));
    a < b
}

#[cfg(test)]
mod tests {
    use super::pick;

    #[test]
    fn fewest_active_wins() {
        assert_eq!(pick(&[(3, 1), (1, 1), (2, 1)], 0), 1);
        assert_eq!(pick(&[(3, 1), (1, 1), (2, 1)], 2), 1);
    }

    #[test]
    fn weight_scales_the_load() {
        // 4 sessions on weight 3 is lighter than 2 on weight 1.
        assert_eq!(pick(&[(2, 1), (4, 3)], 0), 1);
        // 6 on weight 3 equals 2 on weight 1: the rotating start decides.
        assert_eq!(pick(&[(2, 1), (6, 3)], 0), 0);
        assert_eq!(pick(&[(2, 1), (6, 3)], 1), 1);
    }

    #[test]
    fn ties_take_turns() {
        let loads = [(0, 1); 3];
        let picks: Vec<_> = (0..6).map(|c| pick(&loads, c)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }
}
