//! Tasks view: one row per thread.

use ratatui::{buffer::Buffer, layout::Rect};

use super::{Column, draw, no_lock_rows};
use crate::{
    report::{fmt_count, fmt_ns},
    tui::app::App,
};

const COLUMNS: [Column; 7] = [
    Column::fixed("TID", 8),
    Column::fixed("PID", 8),
    Column::flexible("COMM", 16),
    Column::fixed("CONT", 7),
    Column::fixed("WAIT", 9),
    Column::fixed("AVG", 9),
    Column::fixed("MAX", 9),
];

pub(super) fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let rows = app.task_rows().into_iter().map(|t| {
        [
            t.tid.to_string(),
            t.tgid.to_string(),
            t.comm.clone(),
            fmt_count(t.wait.count()),
            fmt_ns(t.wait.total_ns()),
            fmt_ns(t.wait.avg_ns()),
            fmt_ns(t.wait.max_ns()),
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
    fn one_row_per_thread() {
        let app = app_on(fixture::profile(), View::Tasks);
        assert_eq!(
            table_lines(&app, 80, 5)[1..],
            [
                "TID      PID      COMM                     CONT    WAIT      AVG       MAX",
                "4242     4240     forker                   5       100 us    20.0 us   90.0 us",
                "5151     5150     writer, \"quoted\"         4       3.20 us   800 ns    1.10 us",
                "",
            ]
        );
    }
}
