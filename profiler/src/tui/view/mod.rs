//! The tables, one file per view. Each view owns its columns (header cell and
//! width, written once, with the terminal width below which a column is
//! dropped) and turns its rows into cells; this module draws them.

mod callers;
mod cgroups;
mod locks;
mod tasks;
mod yields;

use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Rect},
    style::{Color, Modifier, Style},
    widgets::{Block, Borders, Cell, Paragraph, Row, StatefulWidget, Table, TableState, Widget},
};

use super::app::{App, View};
use crate::{model::Stats, report::fmt_ns};

/// One column of a view's table.
struct Column {
    /// Header cell.
    title: &'static str,
    /// Width.
    width: Constraint,
    /// The column is shown only in tables at least this wide.
    min_table_width: u16,
}

impl Column {
    /// A column of exactly `n` cells.
    const fn fixed(title: &'static str, n: u16) -> Column {
        Column { title, width: Constraint::Length(n), min_table_width: 0 }
    }

    /// A column of at least `n` cells that takes what the others leave.
    const fn flexible(title: &'static str, n: u16) -> Column {
        Column { title, width: Constraint::Min(n), min_table_width: 0 }
    }

    /// Shown only in tables at least `width` wide.
    const fn shown_from(self, width: u16) -> Column {
        Column { min_table_width: width, ..self }
    }

    fn shown(&self, table_width: u16) -> bool {
        table_width >= self.min_table_width
    }
}

/// The columns shown in a table `table_width` wide.
fn shown(columns: &[Column], table_width: u16) -> impl Iterator<Item = &Column> {
    columns.iter().filter(move |c| c.shown(table_width))
}

/// What the shown fixed columns, and the one-cell gaps between all shown
/// columns, leave of a table `table_width` wide for its flexible columns.
fn flexible_width(columns: &[Column], table_width: u16) -> usize {
    let (mut used, mut count) = (0usize, 0usize);
    for c in shown(columns, table_width) {
        count += 1;
        if let Constraint::Length(n) = c.width {
            used += usize::from(n);
        }
    }
    usize::from(table_width).saturating_sub(used + count.saturating_sub(1))
}

/// The table of the current view.
pub(super) fn render(app: &App, area: Rect, buf: &mut Buffer) {
    match app.view {
        View::Locks => locks::render(app, area, buf),
        View::Callers => callers::render(app, area, buf),
        View::Tasks => tasks::render(app, area, buf),
        View::Cgroups => cgroups::render(app, area, buf),
        View::Yield => yields::render(app, area, buf),
    }
}

/// Draws a table: the shown columns of `rows` (one cell per column) under
/// their headers, the selection highlighted, or `empty` when there are no rows.
fn draw<const N: usize>(
    app: &App,
    columns: &[Column; N],
    rows: impl IntoIterator<Item = [String; N]>,
    empty: fn(&App) -> String,
    area: Rect,
    buf: &mut Buffer,
) {
    let shown_mask = columns.each_ref().map(|c| c.shown(area.width));
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|cells| Row::new(cells.into_iter().zip(shown_mask).filter(|(_, s)| *s).map(|(c, _)| Cell::from(c))))
        .collect();
    let header = Row::new(shown(columns, area.width).map(|c| c.title))
        .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    let widths: Vec<Constraint> = shown(columns, area.width).map(|c| c.width).collect();
    let is_empty = rows.is_empty();
    let t = Table::new(rows, widths)
        .header(header)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::new().borders(Borders::TOP));
    let mut state = TableState::default().with_selected(if is_empty { None } else { Some(app.selected) });
    StatefulWidget::render(t, area, buf, &mut state);
    if is_empty {
        let inner = Rect { y: area.y.saturating_add(2), height: area.height.saturating_sub(2), ..area };
        Paragraph::new(empty(app)).style(Style::new().fg(Color::DarkGray)).render(inner, buf);
    }
}

/// Why a table of locks, callers or tasks has no rows.
fn no_lock_rows(app: &App) -> String {
    if app.profile.locks.is_empty() { "waiting for lock contention...".to_string() } else { NO_MATCH.to_string() }
}

/// The filters hide every row.
pub(super) const NO_MATCH: &str = "no rows match the filters";

/// Total hold time, or `-` where holds are not measured.
fn hold_cell(h: Option<&Stats>) -> String {
    h.map(|h| fmt_ns(h.total_ns())).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{model::Profile, tui::Action};

    /// The lines of the current view's table in a `w` x `h` area, right-trimmed.
    pub(crate) fn table_lines(app: &App, w: u16, h: u16) -> Vec<String> {
        let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
        render(app, buf.area, &mut buf);
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>().trim_end().to_string())
            .collect()
    }

    /// An app showing `view` of `p` (one interval of one second).
    pub(crate) fn app_on(p: Profile, view: View) -> App {
        let mut app = App::new();
        app.on_profile(Arc::new(p), 1.0);
        while app.view != view {
            app.apply(Action::NextView);
        }
        app
    }

    #[test]
    fn columns_drop_by_table_width_and_leave_the_rest_to_the_flexible_ones() {
        let cols = [Column::flexible("A", 4), Column::fixed("B", 5), Column::fixed("C", 3).shown_from(20)];
        assert_eq!(shown(&cols, 19).map(|c| c.title).collect::<Vec<_>>(), ["A", "B"]);
        assert_eq!(flexible_width(&cols, 19), 19 - 5 - 1);
        assert_eq!(flexible_width(&cols, 20), 20 - 5 - 3 - 2);
        assert_eq!(flexible_width(&cols, 3), 0);
    }
}
