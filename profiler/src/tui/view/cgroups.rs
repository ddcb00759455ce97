//! cgroups view: one row per cgroup (service, container, pod) of the
//! waiting tasks, with the lock it waited on most.

use ratatui::{buffer::Buffer, layout::Rect};

use super::{Column, draw};
use crate::{
    report::{fmt_count, fmt_ns},
    tui::app::App,
};

const COLUMNS: [Column; 7] = [
    Column::flexible("CGROUP", 20),
    Column::fixed("CONT", 7),
    Column::fixed("WAIT", 9),
    Column::fixed("AVG", 9),
    Column::fixed("MAX", 9),
    Column::flexible("TOP LOCK", 16).shown_from(100),
    Column::flexible("PATH", 20).shown_from(140),
];

/// Why the table has no rows.
fn empty(app: &App) -> String {
    if !app.profile.cgroups.is_empty() {
        super::NO_MATCH.to_string()
    } else if app.profile.locks.is_empty() {
        "waiting for lock contention...".to_string()
    } else {
        "no cgroups recorded (--no-cgroups, or no cgroup v2 hierarchy: see lockprof doctor)".to_string()
    }
}

pub(super) fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let rows = app.cgroup_rows().into_iter().map(|c| {
        [
            c.name.clone(),
            fmt_count(c.wait.count()),
            fmt_ns(c.wait.total_ns()),
            fmt_ns(c.wait.avg_ns()),
            fmt_ns(c.wait.max_ns()),
            c.locks.first().map(|l| l.lock.clone()).unwrap_or_default(),
            c.path.clone().unwrap_or_else(|| "(removed)".into()),
        ]
    });
    draw(app, &COLUMNS, rows, empty, area, buf);
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
    fn one_row_per_cgroup_most_wait_first() {
        let app = app_on(fixture::profile_with_cgroups(), View::Cgroups);
        assert_eq!(
            table_lines(&app, 80, 6)[1..],
            [
                "CGROUP                                     CONT    WAIT      AVG       MAX",
                "cron.service                               5       100 us    20.0 us   90.0 us",
                "docker:3f2a9c1b7d4e                        3       2.70 us   900 ns    1.10 us",
                "nginx.service                              1       500 ns    500 ns    500 ns",
                "",
            ]
        );
        let wide = table_lines(&app, 120, 4);
        assert!(wide[2].contains("cron.service") && wide[2].contains("tasklist_lock"), "{wide:?}");
    }

    #[test]
    fn says_why_there_are_no_rows() {
        let app = app_on(fixture::profile(), View::Cgroups);
        assert!(table_lines(&app, 100, 4).iter().any(|l| l.contains("no cgroups recorded")));
    }
}
