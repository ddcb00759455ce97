//! The summary every table of the bench reports: median, min and max.

/// Median, min and max.
pub fn stats(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let med = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some((med, v[0], v[n - 1]))
}
