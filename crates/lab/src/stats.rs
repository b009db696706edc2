//! The statistics an eval decides with (docs/resume-replay-eval.md, "Eval"):
//! the Wilson interval of a pass rate, and the paired comparison of two
//! variants over the same tasks and repeat indices — the exact McNemar test on
//! the discordant pairs and Newcombe's interval for the difference.

use std::collections::BTreeMap;

use harness_records::{Comparison, VariantReport};

/// The normal quantile of a two-sided 95 % interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The 95 % Wilson score interval of `passes` out of `runs`: sound for
/// the small counts an eval has (a plain ±1.96σ would leave [0, 1]).
pub(crate) fn wilson(passes: u32, runs: u32) -> (f64, f64) {
    if runs == 0 {
        return (0.0, 1.0);
    }
    let (k, n, z) = (f64::from(passes), f64::from(runs), Z95);
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let center = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    // At 0 or all passes the bound is exactly 0 or 1; floating point says 1e-17 off.
    let low = if passes == 0 {
        0.0
    } else {
        (center - half).max(0.0)
    };
    let high = if passes >= runs {
        1.0
    } else {
        (center + half).min(1.0)
    };
    (low, high)
}

/// Three decimals, as the report shows rates.
pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The lower middle value (an eval's counts are small; no halves).
pub(super) fn median<T: Ord + Copy + Default>(mut v: Vec<T>) -> T {
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or_default()
}

/// The exact two-sided McNemar p-value: `a_only` pairs went one way and
/// `b_only` the other; under no difference each way is a fair coin. Summed
/// in logarithms, so thousands of pairs neither overflow nor underflow.
pub(crate) fn mcnemar_p(a_only: u32, b_only: u32) -> f64 {
    let n = a_only.saturating_add(b_only);
    if n == 0 {
        return 1.0;
    }
    let k = a_only.min(b_only);
    let mut ln_term = -f64::from(n) * std::f64::consts::LN_2; // C(n,0) / 2^n
    let mut tail = 0.0;
    for i in 0..=k {
        tail += ln_term.exp();
        ln_term += (f64::from(n - i) / f64::from(i + 1)).ln();
    }
    (2.0 * tail).min(1.0)
}

/// Newcombe's hybrid score interval (1998, method 10) for the difference
/// of two paired proportions: `both` pairs passed in A and B, `a_only`,
/// `b_only`, `neither`. Wilson intervals of each rate, joined with the
/// correlation of the pairs; sound at the small counts an eval has.
pub(crate) fn paired_interval(both: u32, a_only: u32, b_only: u32, neither: u32) -> (f64, f64) {
    let (a, b, c, d) = (
        f64::from(both),
        f64::from(a_only),
        f64::from(b_only),
        f64::from(neither),
    );
    let n = a + b + c + d;
    if n == 0.0 {
        return (-1.0, 1.0);
    }
    let (p1, p2) = ((a + b) / n, (a + c) / n);
    let (l1, u1) = wilson(both + a_only, both + a_only + b_only + neither);
    let (l2, u2) = wilson(both + b_only, both + a_only + b_only + neither);
    // The correlation of the pairs, corrected towards 0 by half a pair
    // (Newcombe's method 10): 0 when a margin is empty.
    let denom = ((a + b) * (c + d) * (a + c) * (b + d)).sqrt();
    let cross = a * d - b * c;
    let phi = match cross {
        _ if denom == 0.0 => 0.0,
        x if x > n / 2.0 => (x - n / 2.0) / denom,
        x if x < 0.0 => x / denom,
        _ => 0.0,
    };
    let delta = p1 - p2;
    let low = delta
        - ((p1 - l1).powi(2) - 2.0 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2).powi(2))
            .max(0.0)
            .sqrt();
    let high = delta
        + ((u1 - p1).powi(2) - 2.0 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2).powi(2))
            .max(0.0)
            .sqrt();
    (low.max(-1.0), high.min(1.0))
}

/// One side of a paired comparison: a `--matrix` value and its variant's runs.
#[derive(Debug, Clone, Copy)]
pub struct Arm<'a> {
    pub value: &'a str,
    pub report: &'a VariantReport,
}

/// Variant `a` against variant `b` of `--matrix KEY=A,B`: the runs of each
/// task paired by repeat index (a task or run one side lacks is left out).
pub fn compare(key: &str, arm_a: Arm<'_>, arm_b: Arm<'_>) -> Comparison {
    let (va, a, vb, b) = (arm_a.value, arm_a.report, arm_b.value, arm_b.report);
    let (mut both, mut a_only, mut b_only, mut neither) = (0u32, 0u32, 0u32, 0u32);
    let empty = Vec::new();
    for (task, runs_a) in &a.outcomes {
        let runs_b = b.outcomes.get(task).unwrap_or(&empty);
        for (x, y) in runs_a.iter().zip(runs_b) {
            let n = match (x, y) {
                (true, true) => &mut both,
                (true, false) => &mut a_only,
                (false, true) => &mut b_only,
                (false, false) => &mut neither,
            };
            *n = n.saturating_add(1);
        }
    }
    let pairs = both + a_only + b_only + neither;
    let difference = if pairs == 0 {
        0.0
    } else {
        (f64::from(a_only) - f64::from(b_only)) / f64::from(pairs)
    };
    let (low, high) = paired_interval(both, a_only, b_only, neither);
    // Decided on the p-value as it is shown: a p of 0.04998 reads 0.0500,
    // which is no difference at 95 %.
    let p_value = (mcnemar_p(a_only, b_only) * 10_000.0).round() / 10_000.0;
    let verdict = match (p_value < 0.05, a_only.cmp(&b_only)) {
        (true, std::cmp::Ordering::Greater) => format!("{key}={va} better"),
        (true, std::cmp::Ordering::Less) => format!("{key}={vb} better"),
        _ => "no difference found at 95 %".to_string(),
    };
    Comparison {
        key: key.to_string(),
        a: va.to_string(),
        b: vb.to_string(),
        pairs,
        a_only,
        b_only,
        difference: round3(difference),
        ci_low: round3(low),
        ci_high: round3(high),
        p_value,
        verdict,
    }
}

/// The most common of `seen` (the first in name order on a tie).
pub(crate) fn most_common(seen: impl IntoIterator<Item = String>) -> Option<String> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for s in seen {
        *counts.entry(s).or_insert(0) += 1;
    }
    let top = counts.values().copied().max()?;
    counts.into_iter().find(|(_, n)| *n == top).map(|(s, _)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm<'a>(value: &'a str, report: &'a VariantReport) -> Arm<'a> {
        Arm { value, report }
    }

    fn variant(outcomes: &[(&str, &[bool])]) -> VariantReport {
        VariantReport {
            set: BTreeMap::new(),
            tasks: Vec::new(),
            totals: harness_records::Totals {
                runs: 0,
                passes: 0,
                pass_rate: 0.0,
                ci_low: 0.0,
                ci_high: 0.0,
                pass_hat_k: 0.0,
            },
            outcomes: outcomes
                .iter()
                .map(|(t, o)| (t.to_string(), o.to_vec()))
                .collect(),
        }
    }

    #[test]
    fn mcnemar_matches_hand_computed_binomial_tails() {
        let close = |p: f64, want: f64| (p - want).abs() < 1e-12;
        // All 6 discordant pairs one way: 2 × (1/2)^6.
        assert!(close(mcnemar_p(6, 0), 0.031_25) && close(mcnemar_p(0, 6), 0.031_25));
        // 5 discordant pairs one way: 2/32, not significant.
        assert!(close(mcnemar_p(5, 0), 0.0625));
        // 8 against 2: 2 × (1 + 10 + 45) / 1024.
        assert!(close(mcnemar_p(8, 2), 112.0 / 1024.0));
        // Balanced, and none at all.
        assert_eq!(mcnemar_p(4, 4), 1.0);
        assert_eq!(mcnemar_p(0, 0), 1.0);
        // Thousands of pairs neither overflow nor underflow.
        let p = mcnemar_p(3000, 2000);
        assert!(p > 0.0 && p < 1e-40, "{p}");
        assert_eq!(mcnemar_p(5000, 5000), 1.0);
    }

    #[test]
    fn newcombes_interval_matches_a_published_example() {
        // Complete response before and after consolidation therapy (Cavo et
        // al. 2012, in Fagerland, Lydersen & Laake, "Statistical Analysis of
        // Contingency Tables", ch. 8): 59 both, 6 first only, 16 second
        // only, 80 neither: −0.0621, 95 % CI −0.1186 to −0.0046.
        let (low, high) = paired_interval(59, 6, 16, 80);
        assert!(
            (low + 0.1186).abs() < 5e-5 && (high + 0.0046).abs() < 5e-5,
            "{low} {high}"
        );
        assert_eq!(paired_interval(0, 0, 0, 0), (-1.0, 1.0));
        // Six pairs, all one way: 1 − √(0.390² + 0.390²) = 0.448 (the two
        // Wilson intervals of 0/6 and 6/6), up to 1.
        let (low, high) = paired_interval(0, 6, 0, 0);
        assert!((low - 0.448).abs() < 5e-4 && high == 1.0, "{low} {high}");
    }

    #[test]
    fn an_arm_that_always_passes_against_one_that_always_fails_is_called() {
        let always = variant(&[("a", &[true, true, true]), ("b", &[true, true, true])]);
        let never = variant(&[("a", &[false, false, false]), ("b", &[false, false, false])]);
        let c = compare(
            "model.replay_thinking",
            arm("keep", &always),
            arm("strip", &never),
        );
        assert_eq!((c.pairs, c.a_only, c.b_only), (6, 6, 0));
        assert_eq!((c.difference, c.p_value), (1.0, 0.0313));
        assert_eq!(c.verdict, "model.replay_thinking=keep better");
        let c = compare("k", arm("x", &never), arm("y", &always));
        assert_eq!((c.difference, c.verdict.as_str()), (-1.0, "k=y better"));
        // The same arm twice: nothing discordant, nothing found.
        let c = compare("k", arm("x", &always), arm("y", &always));
        assert_eq!(
            (c.difference, c.p_value, c.verdict.as_str()),
            (0.0, 1.0, "no difference found at 95 %")
        );
        // Balanced disagreement.
        let one = variant(&[("a", &[true, false, true, false])]);
        let other = variant(&[("a", &[false, true, false, true])]);
        let c = compare("k", arm("x", &one), arm("y", &other));
        assert_eq!((c.a_only, c.b_only, c.p_value), (2, 2, 1.0));
        assert!(c.ci_low < 0.0 && c.ci_high > 0.0);
        // 117 against 150: the exact p is 0.049983, shown as 0.0500, and the
        // verdict goes with what is shown.
        let ones = |n: usize, v: bool| vec![v; n];
        let mut a = ones(117, true);
        a.extend(ones(150, false));
        let mut b = ones(117, false);
        b.extend(ones(150, true));
        let (a, b) = (variant(&[("t", &a)]), variant(&[("t", &b)]));
        let c = compare("k", arm("x", &a), arm("y", &b));
        assert!(mcnemar_p(117, 150) < 0.05);
        assert_eq!(
            (c.p_value, c.verdict.as_str()),
            (0.05, "no difference found at 95 %")
        );
        // A task one side lacks is not paired.
        let extra = variant(&[("a", &[true]), ("z", &[true, true])]);
        assert_eq!(compare("k", arm("x", &extra), arm("y", &never)).pairs, 1);
    }

    #[test]
    fn the_most_common_failure_wins_and_ties_go_by_name() {
        let seen = ["max_turns", "answer_matches", "max_turns"].map(String::from);
        assert_eq!(most_common(seen).as_deref(), Some("max_turns"));
        let tie = ["b", "a"].map(String::from);
        assert_eq!(most_common(tie).as_deref(), Some("a"));
        assert_eq!(most_common(Vec::new()), None);
    }
}
