//! Locks view: one row per lock. Narrow terminals drop the least essential
//! columns first.

use ratatui::{buffer::Buffer, layout::Rect};

use super::{Column, draw, flexible_width, hold_cell, no_lock_rows};
use crate::{
    report::{fmt_count, fmt_ns},
    tui::app::App,
};

/// Tables at least this wide show the rate and the longest wait.
const MEDIUM: u16 = 72;
/// Tables at least this wide show everything.
const WIDE: u16 = 96;
/// The lock column's least width.
const LOCK_WIDTH: u16 = 16;

const COLUMNS: [Column; 9] = [
    Column::flexible("LOCK", LOCK_WIDTH),
    Column::fixed("TYPE", 10),
    Column::fixed("CONT/S", 7).shown_from(MEDIUM),
    Column::fixed("CONT", 7),
    Column::fixed("WAIT", 9),
    Column::fixed("AVG", 9).shown_from(WIDE),
    Column::fixed("MAX", 9).shown_from(MEDIUM),
    Column::fixed("P99", 9),
    Column::fixed("HOLD", 8).shown_from(WIDE),
];

pub(super) fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let name_width = flexible_width(&COLUMNS, area.width).max(usize::from(LOCK_WIDTH));
    let rows = app.lock_rows().into_iter().map(|l| {
        [
            fit(app.label(l), name_width),
            l.type_label(),
            fmt_count(app.rate_of(l) as u64),
            fmt_count(l.wait.count()),
            fmt_ns(l.wait.total_ns()),
            fmt_ns(l.wait.avg_ns()),
            fmt_ns(l.wait.max_ns()),
            fmt_ns(l.wait.quantile_ns(0.99)),
            hold_cell(l.hold.as_ref()),
        ]
    });
    draw(app, &COLUMNS, rows, no_lock_rows, area, buf);
}

/// `label` in at most `width` columns, keeping a trailing `#<hex>` instance
/// suffix visible (it tells locks with one name apart): the middle is elided.
fn fit(label: &str, width: usize) -> String {
    let n = label.chars().count();
    if n <= width || width == 0 {
        return label.to_string();
    }
    let suffix = label.rfind(" #").map_or("", |i| &label[i + 1..]);
    let keep = width.saturating_sub(suffix.chars().count() + 1);
    if suffix.is_empty() || keep == 0 {
        return label.chars().take(width).collect();
    }
    format!("{}…{suffix}", label.chars().take(keep).collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        report::fixture,
        tui::{
            app::View,
            view::tests::{app_on, table_lines},
        },
    };

    #[test]
    fn columns_by_terminal_width() {
        let app = app_on(fixture::profile(), View::Locks);
        assert_eq!(
            table_lines(&app, 100, 5),
            [
                "─".repeat(100).as_str(),
                "LOCK                     TYPE       CONT/S  CONT    WAIT      AVG       MAX       P99       HOLD",
                "tasklist_lock            rwlock:W   5       5       100 us    20.0 us   90.0 us   90.0 us   -",
                "mutex @ anon_pipe_write  mutex      4       4       3.20 us   800 ns    1.10 us   1.10 us   -",
                "",
            ]
        );
        assert_eq!(
            table_lines(&app, 80, 4)[1..],
            [
                "LOCK                    TYPE       CONT/S  CONT    WAIT      MAX       P99",
                "tasklist_lock           rwlock:W   5       5       100 us    90.0 us   90.0 us",
                "mutex @ anon_pipe_write mutex      4       4       3.20 us   1.10 us   1.10 us",
            ]
        );
        assert_eq!(
            table_lines(&app, 60, 4)[1..],
            [
                "LOCK                  TYPE       CONT    WAIT      P99",
                "tasklist_lock         rwlock:W   5       100 us    90.0 us",
                "mutex @ anon_pipe_wri mutex      4       3.20 us   1.10 us",
            ]
        );
    }

    #[test]
    fn says_why_there_are_no_rows() {
        let app = app_on(crate::model::Profile::default(), View::Locks);
        assert_eq!(table_lines(&app, 40, 4)[2..], ["waiting for lock contention...", ""]);
        let mut app = app_on(fixture::profile(), View::Locks);
        while app.type_filter() != Some(profiler_common::LockType::Spinlock) {
            app.apply(crate::tui::Action::CycleType);
        }
        assert_eq!(table_lines(&app, 40, 4)[2..], ["no rows match the filters", ""]);
    }

    #[test]
    fn labels_are_cut_in_the_middle_keeping_the_instance() {
        assert_eq!(fit("mutex @ anon_pipe_write #a1b2c0", 21), "mutex @ anon_…#a1b2c0");
        assert_eq!(fit("short", 21), "short");
        assert_eq!(fit("tasklist_lock (no suffix here at all)", 10), "tasklist_l");
    }
}
