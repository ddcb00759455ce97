//! yield_to view (KVM directed yield): caller paths, then (yielder, target)
//! pairs.

use ratatui::{buffer::Buffer, layout::Rect};

use super::{Column, NO_MATCH, draw};
use crate::{
    report::{fmt_count, fmt_ns},
    tui::app::App,
};

const COLUMNS: [Column; 8] = [
    Column::fixed("ROW", 4),
    Column::flexible("CALLER PATH / YIELDER -> TARGET", 24),
    Column::fixed("CALLS", 7),
    Column::fixed("YIELDED", 7),
    Column::fixed("FAILED", 7),
    Column::fixed("ERR", 5),
    Column::fixed("AVG", 9),
    Column::fixed("MAX", 9),
];

pub(super) fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let rows = app.yield_rows().iter().map(|r| {
        let s = &r.stats;
        [
            r.kind.to_string(),
            r.name.clone(),
            fmt_count(s.calls()),
            fmt_count(s.yielded),
            fmt_count(s.failed),
            fmt_count(s.errors),
            fmt_ns(s.latency.avg_ns()),
            fmt_ns(s.latency.max_ns()),
        ]
    });
    draw(app, &COLUMNS, rows, why_empty, area, buf);
}

/// Why there are no rows: not probed, no calls yet, or filtered out.
fn why_empty(app: &App) -> String {
    match &app.profile.yield_to {
        None => format!(
            "yield_to is not profiled: {}",
            app.profile.meta.yield_unavailable.as_deref().unwrap_or("no profile yet")
        ),
        Some(y) if y.total.calls() == 0 => "no yield_to calls yet (no KVM vCPU has yielded)".to_string(),
        Some(_) => NO_MATCH.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use crate::{
        report::fixture,
        tui::{
            app::View,
            view::tests::{app_on, table_lines},
        },
    };

    #[test]
    fn caller_paths_then_pairs() {
        let app = app_on(fixture::profile_with_yields(), View::Yield);
        assert_eq!(
            table_lines(&app, 120, 7)[1..],
            [
                "ROW  CALLER PATH / YIELDER -> TARGET                                   CALLS   YIELDED FAILED  ERR   AVG       MAX",
                "path kvm_vcpu_yield_to <- kvm_sched_yield <- kvm_emulate_hypercall     4       3       1       0     38.0 us   60.0 us",
                "path kvm_vcpu_yield_to <- kvm_vcpu_on_spin                             1       0       0       1     1.00 us   1.00 us",
                "pair 301 vcpu0 -> 302 vcpu1                                            4       3       1       0     38.0 us   60.0 us",
                "pair 302 vcpu1 -> 301 vcpu0                                            1       0       0       1     1.00 us   1.00 us",
                "",
            ]
        );
    }

    #[test]
    fn says_why_there_are_no_rows() {
        let app = app_on(fixture::profile(), View::Yield);
        assert_eq!(table_lines(&app, 80, 3)[2], "yield_to is not profiled: yield_to cannot be probed on this kernel");
    }
}
