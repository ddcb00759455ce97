//! Welch's unequal-variances t-test, two-sided, and the Holm-Bonferroni
//! correction for testing many rows at once. Pure functions of numbers.

use super::beta::incomplete_beta;

/// The two-sided p-value of Student's t with `df` degrees of freedom:
/// `P(|T| >= |t|) = I_{df / (df + t²)}(df / 2, 1 / 2)`.
pub fn student_t_two_sided(t: f64, df: f64) -> f64 {
    if !t.is_finite() {
        return if t.is_nan() { 1.0 } else { 0.0 };
    }
    incomplete_beta(df / 2.0, 0.5, df / (df + t * t)).clamp(0.0, 1.0)
}

/// The outcome of Welch's t-test of two samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Welch {
    /// `(mean(a) - mean(b)) / sqrt(var(a)/n_a + var(b)/n_b)`.
    pub t: f64,
    /// Welch-Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

/// Mean and unbiased (n - 1) variance.
pub fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = if x.len() > 1 { x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var)
}

/// Welch's t-test of `a` against `b`, two-sided. None when a side has fewer
/// than two values, or when neither side varies at all (no spread to judge
/// a difference against).
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let ((ma, va), (mb, vb)) = (mean_var(a), mean_var(b));
    let (sa, sb) = (va / a.len() as f64, vb / b.len() as f64);
    let se2 = sa + sb;
    if se2 <= 0.0 || !se2.is_finite() {
        return None;
    }
    let t = (ma - mb) / se2.sqrt();
    // A side without spread contributes no degrees of freedom.
    let df = se2 * se2 / (sa * sa / (a.len() - 1) as f64 + sb * sb / (b.len() - 1) as f64);
    Some(Welch { t, df, p: student_t_two_sided(t, df) })
}

/// Holm-Bonferroni adjusted p-values, in the order given: the i-th smallest
/// p (from 0) times `m - i`, made non-decreasing, at most 1. Rejecting where
/// the adjusted p is below alpha keeps the chance of any false rejection
/// among the m tests below alpha, whatever their dependence.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![1.0; m];
    let mut running = 0.0f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() <= rel * want.abs()
    }

    /// Reference values computed independently (numerical integration of
    /// Student's density, 2M Simpson steps; agrees with the closed forms to
    /// 1e-12) and the critical values every t table prints.
    #[test]
    fn student_t_matches_references_and_tables() {
        // df = 1 is Cauchy: P(|T| >= 1) = 1/2. df = 2: 1 - t / sqrt(2 + t²).
        assert!(close(student_t_two_sided(1.0, 1.0), 0.5, 1e-12));
        assert!(close(student_t_two_sided(3.0, 2.0), 1.0 - 3.0 / 11f64.sqrt(), 1e-10));
        assert!(close(student_t_two_sided(2.0, 5.0), 0.101_939_478_829_861_37, 1e-9));
        assert!(close(student_t_two_sided(-2.0, 5.0), 0.101_939_478_829_861_37, 1e-9));
        // Table: t(0.975) and t(0.995) critical values.
        for (t, df, p) in [
            (12.706, 1.0, 0.05),
            (4.303, 2.0, 0.05),
            (2.776, 4.0, 0.05),
            (2.228, 10.0, 0.05),
            (63.657, 1.0, 0.01),
            (9.925, 2.0, 0.01),
            (4.604, 4.0, 0.01),
            (3.169, 10.0, 0.01),
        ] {
            let got = student_t_two_sided(t, df);
            assert!(close(got, p, 2e-3), "t={t} df={df}: {got}");
        }
        // Large df: the normal distribution.
        assert!(close(student_t_two_sided(1.959_963_985, 1e7), 0.05, 1e-5));
        assert_eq!(student_t_two_sided(0.0, 3.0), 1.0);
        assert_eq!(student_t_two_sided(f64::INFINITY, 3.0), 0.0);
    }

    #[test]
    fn welch_matches_references() {
        let w = welch(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 6.0, 8.0, 10.0]).expect("test");
        assert!(close(w.t, -1.897_366_596_101_027_5, 1e-12), "{w:?}");
        assert!(close(w.df, 5.882_352_941_176_471, 1e-12), "{w:?}");
        assert!(close(w.p, 0.107_531_194_930_623_91, 1e-8), "{w:?}");
        // Wikipedia's Welch example (A1 against A2): t = -2.46, df = 25.0, p = 0.021.
        let a1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4];
        let a2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4];
        let w = welch(&a1, &a2).expect("test");
        assert!(close(w.t, -2.455_356_398_286_01, 1e-10), "{w:?}");
        assert!(close(w.df, 24.988_529_290_231_42, 1e-10), "{w:?}");
        assert!(close(w.p, 0.021_378_001_462_861_28, 1e-8), "{w:?}");
        // A lock gone after a change: the after side is all zeros (no
        // spread), the test still stands on the before side's spread.
        let w = welch(&[8000.0, 8200.0, 7900.0], &[0.0; 3]).expect("test");
        assert!(close(w.df, 2.0, 1e-12) && close(w.p, 0.000_120_499_557_171_217_61, 1e-8), "{w:?}");
    }

    #[test]
    fn welch_refuses_what_it_cannot_judge() {
        assert_eq!(welch(&[1.0], &[2.0, 3.0]), None, "one round");
        assert_eq!(welch(&[5.0, 5.0], &[7.0, 7.0]), None, "no spread on either side");
        assert_eq!(welch(&[], &[]), None);
        // Identical samples: t = 0, p = 1.
        let w = welch(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]).expect("test");
        assert_eq!((w.t, w.p), (0.0, 1.0));
    }

    #[test]
    fn holm_adjusts_step_down_and_keeps_order() {
        // m = 4: sorted 0.01, 0.02, 0.03, 0.04 -> 0.04, 0.06, 0.06, 0.06.
        let adj = holm(&[0.03, 0.01, 0.04, 0.02]);
        let want = [0.06, 0.04, 0.06, 0.06];
        for (g, w) in adj.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{adj:?}");
        }
        assert_eq!(holm(&[0.5, 0.9]), [1.0, 1.0], "capped at 1");
        assert_eq!(holm(&[0.004]), [0.004], "one test: unchanged");
        assert!(holm(&[]).is_empty());
    }
}
