//! Map operations the kernel refused mid-session: counted every time
//! (`map_ops_refused`), said once.

use std::fmt::Display;

/// The count of refused map operations and whether the first was told.
#[derive(Debug, Default)]
pub struct Refusals {
    count: u64,
}

impl Refusals {
    /// Counts one refusal of `what`; the first one's line, to be said once
    /// (later ones are only counted, and the report names the total).
    pub fn note(&mut self, what: &str, err: &dyn Display) -> Option<String> {
        self.count += 1;
        (self.count == 1).then(|| {
            format!(
                "the kernel refused a map operation ({what}: {err}); the session goes on, and every refusal is counted as map_ops_refused in the report"
            )
        })
    }

    /// Refusals so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_refusal_is_told_and_every_one_counted() {
        let mut r = Refusals::default();
        let eperm = std::io::Error::from_raw_os_error(libc::EPERM);
        let first = r.note("flipping the aggregate maps", &eperm).expect("the first is told");
        assert!(first.contains("flipping the aggregate maps") && first.contains("map_ops_refused"), "{first}");
        assert_eq!(first.lines().count(), 1);
        assert_eq!(r.note("flipping the aggregate maps", &eperm), None);
        assert_eq!(r.note("draining the aggregate maps", &eperm), None);
        assert_eq!(r.count(), 3);
    }
}
