//! Sampling probabilities for the graduated variants: the Garivier–Kaufmann (2016) optimal
//! allocation for Gaussian arms with plug-in variances, a `min_prob` floor, and a pull toward
//! uniform of weight α = 0.01/√N. TensorZero states it as a cone program; this solves the same
//! problem directly:
//!
//! minimise  max over challengers i of 2(σ²_i/w_i + σ²_L/w_L)/g²_i  +  α‖w − 1/K‖²
//! over      w with Σw = 1 and every w ≥ max(min_prob, 1e-6)
//!
//! where L is the leader and g_i = μ_L − μ_i + ε (g² floored at 1e-6). The problem is convex, and
//! so is each of the one-dimensional searches it is split into: the outer search is over the value
//! t of the max term; for a given t, each challenger needs w_i ≥ σ²_i/(g²_i·t/2 − σ²_L/w_L), so
//! only w_L is searched, and the challengers' shares are the closest to uniform above those
//! bounds (water-filling). Golden-section searches and bisections do the rest; the result matches
//! the cone program's within 1e-4 (`allocation_tests.rs` holds its solutions for reference cases).

use super::stopping::Arms;

const MIN_PROB_FLOOR: f64 = 1e-6;
const GAP2_FLOOR: f64 = 1e-6;
const REGULARISATION: f64 = 0.01;
const ITERATIONS: usize = 100;

/// The probability of each arm (in the arms' order), summing to 1.
pub(crate) fn optimal_allocation(arms: &Arms, epsilon: f64, min_prob: f64) -> Vec<f64> {
    let k = arms.means.len();
    let uniform = vec![1.0 / k as f64; k];
    let Some(leader) = arms.leader() else {
        return uniform;
    };
    if k < 2 {
        return uniform;
    }
    let gaps: Vec<f64> = arms.means.iter().map(|m| arms.means[leader] - m + epsilon).collect();
    let spread = arms.variances.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        - arms.variances.iter().copied().fold(f64::INFINITY, f64::min);
    if gaps.iter().all(|g| g.abs() < 1e-10) && spread < 1e-10 {
        return uniform;
    }
    let total: u64 = arms.counts.iter().sum();
    let problem = Problem {
        leader,
        variances: &arms.variances,
        half_gap2: gaps.iter().map(|g| (g * g).max(GAP2_FLOOR) / 2.0).collect(),
        floor: min_prob.max(MIN_PROB_FLOOR).min(1.0 / k as f64),
        alpha: REGULARISATION / (total.max(1) as f64).sqrt(),
        uniform: 1.0 / k as f64,
    };
    problem.solve().unwrap_or(uniform)
}

struct Problem<'a> {
    leader: usize,
    variances: &'a [f64],
    /// g²_i / 2 per arm.
    half_gap2: Vec<f64>,
    floor: f64,
    alpha: f64,
    uniform: f64,
}

/// The argmin of a convex `f` on `[lo, hi]`.
fn golden(mut lo: f64, mut hi: f64, f: impl Fn(f64) -> f64) -> f64 {
    const R: f64 = 0.618_033_988_749_894_9;
    let mut a = hi - R * (hi - lo);
    let mut b = lo + R * (hi - lo);
    let (mut fa, mut fb) = (f(a), f(b));
    for _ in 0..ITERATIONS {
        if fa <= fb {
            hi = b;
            b = a;
            fb = fa;
            a = hi - R * (hi - lo);
            fa = f(a);
        } else {
            lo = a;
            a = b;
            fa = fb;
            b = lo + R * (hi - lo);
            fb = f(b);
        }
    }
    (lo + hi) / 2.0
}

/// The point in `[lo, hi]` where a monotone `ok` switches, `ok(lo) != ok(hi)`: the last/first
/// point where `ok` holds, on the side of `good`.
fn bisect(mut good: f64, mut bad: f64, ok: impl Fn(f64) -> bool) -> f64 {
    for _ in 0..ITERATIONS {
        let mid = (good + bad) / 2.0;
        if ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    good
}

impl Problem<'_> {
    fn challengers(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.variances.len()).filter(move |&i| i != self.leader)
    }

    /// The objective's max term at `w`.
    fn max_term(&self, w: &[f64]) -> f64 {
        let l = self.leader;
        self.challengers()
            .map(|i| (self.variances[i] / w[i] + self.variances[l] / w[l]) / self.half_gap2[i])
            .fold(0.0, f64::max)
    }

    /// Each challenger's lowest share at max term `t` with leader share `wl` (`None`: infeasible).
    fn lower_bounds(&self, t: f64, wl: f64) -> Option<Vec<(usize, f64)>> {
        let leader_term = self.variances[self.leader] / wl;
        self.challengers()
            .map(|i| {
                let room = self.half_gap2[i] * t - leader_term;
                (room > 0.0).then(|| (i, (self.variances[i] / room).max(self.floor)))
            })
            .collect()
    }

    /// The shares needed at `t` with leader share `wl`: ∞ when infeasible.
    fn needed(&self, t: f64, wl: f64) -> f64 {
        match self.lower_bounds(t, wl) {
            Some(bounds) => wl + bounds.iter().map(|(_, b)| b).sum::<f64>(),
            None => f64::INFINITY,
        }
    }

    /// The leader shares feasible at `t`, `None` when there is none.
    fn leader_range(&self, t: f64) -> Option<(f64, f64)> {
        let l = self.leader;
        let k = self.variances.len() as f64;
        let smallest = self
            .challengers()
            .map(|i| self.variances[l] / (self.half_gap2[i] * t))
            .fold(self.floor, f64::max);
        let largest = 1.0 - (k - 1.0) * self.floor;
        if smallest >= largest {
            return None;
        }
        let best = golden(smallest, largest, |wl| self.needed(t, wl));
        if self.needed(t, best) > 1.0 {
            return None;
        }
        let lo = bisect(best, smallest, |wl| self.needed(t, wl) <= 1.0);
        let hi = bisect(best, largest, |wl| self.needed(t, wl) <= 1.0);
        Some((lo, hi))
    }

    /// The shares closest to uniform at `t` with leader share `wl` (`None`: infeasible).
    fn closest(&self, t: f64, wl: f64) -> Option<Vec<f64>> {
        let bounds = self.lower_bounds(t, wl)?;
        let rest = 1.0 - wl;
        let filled = |lambda: f64| -> f64 { bounds.iter().map(|(_, b)| b.max(self.uniform + lambda)).sum() };
        if filled(-self.uniform - 1.0) > rest + 1e-12 {
            return None;
        }
        let lambda = bisect(-self.uniform - 1.0, rest + 1.0, |lambda| filled(lambda) <= rest);
        let mut w = vec![0.0; self.variances.len()];
        w[self.leader] = wl;
        for (i, bound) in bounds {
            w[i] = bound.max(self.uniform + lambda);
        }
        Some(w)
    }

    fn distance(&self, w: &[f64]) -> f64 {
        w.iter().map(|x| (x - self.uniform).powi(2)).sum()
    }

    /// The best shares at max term `t` and their objective (`None`: infeasible).
    fn best_at(&self, t: f64) -> Option<(Vec<f64>, f64)> {
        let (lo, hi) = self.leader_range(t)?;
        let score = |wl: f64| self.closest(t, wl).map_or(f64::INFINITY, |w| self.distance(&w));
        let wl = golden(lo, hi, score);
        let w = self.closest(t, wl)?;
        let objective = t + self.alpha * self.distance(&w);
        Some((w, objective))
    }

    fn solve(&self) -> Option<Vec<f64>> {
        let uniform = vec![self.uniform; self.variances.len()];
        let t_uniform = self.max_term(&uniform);
        let t_least = bisect(t_uniform, 0.0, |t| self.leader_range(t).is_some());
        let t = golden(t_least, t_uniform, |t| {
            self.best_at(t).map_or(f64::INFINITY, |(_, objective)| objective)
        });
        let (mut w, _) = self.best_at(t).or_else(|| self.best_at(t_least))?;
        let sum: f64 = w.iter().sum();
        for x in &mut w {
            *x /= sum;
        }
        Some(w)
    }
}

#[cfg(test)]
#[path = "allocation_tests.rs"]
mod tests;
