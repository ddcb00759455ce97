//! Callers view: one row per (lock, caller stack).

use ratatui::{buffer::Buffer, layout::Rect};

use super::{Column, draw, hold_cell, no_lock_rows};
use crate::{
    report::{fmt_count, fmt_ns},
    tui::app::App,
};

const COLUMNS: [Column; 7] = [
    Column::flexible("CALLER", 20),
    Column::flexible("LOCK", 16),
    Column::fixed("CONT", 7),
    Column::fixed("WAIT", 9),
    Column::fixed("AVG", 9),
    Column::fixed("MAX", 9),
    Column::fixed("HOLD", 8),
];

pub(super) fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let rows = app.caller_rows().into_iter().map(|(l, c)| {
        [
            c.caller.clone(),
            app.label(l).to_string(),
            fmt_count(c.wait.count()),
            fmt_ns(c.wait.total_ns()),
            fmt_ns(c.wait.avg_ns()),
            fmt_ns(c.wait.max_ns()),
            hold_cell(c.hold.as_ref()),
        ]
    });
    draw(app, &COLUMNS, rows, no_lock_rows, area, buf);
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
    fn one_row_per_lock_and_caller() {
        let app = app_on(fixture::profile(), View::Callers);
        assert_eq!(
            table_lines(&app, 100, 6)[1..],
            [
                "CALLER                     LOCK                       CONT    WAIT      AVG       MAX       HOLD",
                "copy_process+0x6f1         tasklist_lock              3       96.0 us   32.0 us   90.0 us   -",
                "release_task+0x5a          tasklist_lock              2       4.00 us   2.00 us   3.00 us   -",
                "anon_pipe_write+0x1c4      mutex @ anon_pipe_write    4       3.20 us   800 ns    1.10 us   -",
                "",
            ]
        );
    }
}
