//! Rendering: a pure function of [`App`] (no I/O, no locks, no panics on
//! empty data or huge numbers).

use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{
        Bar, BarChart, BarGroup, Block, Borders, Cell, Clear, Paragraph, Row, Sparkline, StatefulWidget, Table,
        TableState, Widget,
    },
};

use super::{
    app::{App, View},
    keys::BINDINGS,
};
use crate::{
    model::{LockProfile, OwnerKind, Stats, type_name},
    query::SortKey,
    report::{fmt_count, fmt_ns},
};

fn sort_name(k: SortKey) -> &'static str {
    match k {
        SortKey::Contended => "contended",
        SortKey::WaitTotal => "wait total",
        SortKey::WaitMax => "wait max",
        SortKey::WaitAvg => "wait avg",
        SortKey::WaitP99 => "wait p99",
    }
}

fn hms(s: f64) -> String {
    let s = s.max(0.0) as u64;
    format!("{:02}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

fn header(app: &App, area: Rect, buf: &mut Buffer) {
    let m = &app.profile.meta;
    let mut l1 = vec![
        Span::styled("lockprof top", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  {} ({})  kernel {}  up {}  {}/s",
            if m.backend.is_empty() { "-" } else { &m.backend },
            if m.mode.is_empty() { "-" } else { &m.mode },
            if m.kernel.is_empty() { "-" } else { &m.kernel },
            hms(app.elapsed_s),
            fmt_count(app.rate as u64)
        )),
    ];
    if let Some(y) = app.profile.yield_to.as_ref().filter(|y| y.total.calls() > 0) {
        l1.push(Span::raw(format!(
            "  yield_to {} ({} yielded)",
            fmt_count(y.total.calls()),
            fmt_count(y.total.yielded)
        )));
    }
    if app.paused {
        l1.push(Span::styled("  PAUSED", Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)));
    }
    let losses: Vec<String> = m.drops.lost().map(|c| format!("{}={}", c.name, c.value)).collect();
    let drops = if losses.is_empty() {
        Span::styled("drops: 0", Style::new().fg(Color::Green))
    } else {
        Span::styled(format!("drops: {}", losses.join(" ")), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD))
    };
    let mut l2 = vec![drops, Span::raw("  ")];
    for v in View::ALL {
        let st = if v == app.view { Style::new().add_modifier(Modifier::REVERSED) } else { Style::new() };
        l2.push(Span::styled(format!(" {} ", v.title()), st));
    }
    l2.push(Span::raw(format!("  sort: {} v", sort_name(app.sort_key()))));
    if let Some(t) = app.type_filter() {
        l2.push(Span::raw(format!("  type: {}", type_name(t))));
    }
    if !app.filter.is_empty() || app.editing_filter {
        l2.push(Span::styled(format!("  /{}", app.filter), Style::new().fg(Color::Cyan)));
    }
    Paragraph::new(vec![Line::from(l1), Line::from(l2)]).render(area, buf);
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

fn hold_cell(h: Option<&Stats>) -> String {
    h.map(|h| fmt_ns(h.total_ns())).unwrap_or_else(|| "-".into())
}

fn table(app: &App, area: Rect, buf: &mut Buffer) {
    let head_style = Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED);
    let (header, rows, widths): (Vec<&str>, Vec<Row>, Vec<Constraint>) = match app.view {
        View::Locks => {
            // Narrow terminals drop the least essential columns first.
            let wide = area.width >= 96;
            let medium = area.width >= 72;
            // What the fixed columns and their gaps leave for the name.
            let fixed = 10 + 7 + 9 + 9 + if medium { 7 + 9 } else { 0 } + if wide { 9 + 8 } else { 0 };
            let gaps = if wide {
                8
            } else if medium {
                6
            } else {
                4
            };
            let name_width = usize::from(area.width).saturating_sub(fixed + gaps).max(16);
            let rows = app
                .lock_rows()
                .into_iter()
                .map(|l| {
                    let mut cells = vec![Cell::from(fit(app.label(l), name_width)), Cell::from(l.type_label())];
                    if medium {
                        cells.push(Cell::from(fmt_count(app.rate_of(l) as u64)));
                    }
                    cells.push(Cell::from(fmt_count(l.wait.count())));
                    cells.push(Cell::from(fmt_ns(l.wait.total_ns())));
                    if wide {
                        cells.push(Cell::from(fmt_ns(l.wait.avg_ns())));
                    }
                    if medium {
                        cells.push(Cell::from(fmt_ns(l.wait.max_ns())));
                    }
                    cells.push(Cell::from(fmt_ns(l.wait.quantile_ns(0.99))));
                    if wide {
                        cells.push(Cell::from(hold_cell(l.hold.as_ref())));
                    }
                    Row::new(cells)
                })
                .collect();
            let mut head = vec!["LOCK", "TYPE"];
            let mut widths = vec![Constraint::Min(16), Constraint::Length(10)];
            if medium {
                head.push("CONT/S");
                widths.push(Constraint::Length(7));
            }
            head.extend(["CONT", "WAIT"]);
            widths.extend([Constraint::Length(7), Constraint::Length(9)]);
            if wide {
                head.push("AVG");
                widths.push(Constraint::Length(9));
            }
            if medium {
                head.push("MAX");
                widths.push(Constraint::Length(9));
            }
            head.push("P99");
            widths.push(Constraint::Length(9));
            if wide {
                head.push("HOLD");
                widths.push(Constraint::Length(8));
            }
            (head, rows, widths)
        }
        View::Callers => {
            let rows = app
                .caller_rows()
                .into_iter()
                .map(|(l, c)| {
                    Row::new(vec![
                        Cell::from(c.caller.clone()),
                        Cell::from(app.label(l).to_string()),
                        Cell::from(fmt_count(c.wait.count())),
                        Cell::from(fmt_ns(c.wait.total_ns())),
                        Cell::from(fmt_ns(c.wait.avg_ns())),
                        Cell::from(fmt_ns(c.wait.max_ns())),
                        Cell::from(hold_cell(c.hold.as_ref())),
                    ])
                })
                .collect();
            (
                vec!["CALLER", "LOCK", "CONT", "WAIT", "AVG", "MAX", "HOLD"],
                rows,
                vec![
                    Constraint::Min(20),
                    Constraint::Min(16),
                    Constraint::Length(7),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(8),
                ],
            )
        }
        View::Tasks => {
            let rows = app
                .task_rows()
                .into_iter()
                .map(|t| {
                    Row::new(vec![
                        Cell::from(t.tid.to_string()),
                        Cell::from(t.tgid.to_string()),
                        Cell::from(t.comm.clone()),
                        Cell::from(fmt_count(t.wait.count())),
                        Cell::from(fmt_ns(t.wait.total_ns())),
                        Cell::from(fmt_ns(t.wait.avg_ns())),
                        Cell::from(fmt_ns(t.wait.max_ns())),
                    ])
                })
                .collect();
            (
                vec!["TID", "PID", "COMM", "CONT", "WAIT", "AVG", "MAX"],
                rows,
                vec![
                    Constraint::Length(8),
                    Constraint::Length(8),
                    Constraint::Min(16),
                    Constraint::Length(7),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Length(9),
                ],
            )
        }
        View::Yield => {
            let rows = app
                .yield_rows()
                .iter()
                .map(|r| {
                    let l = &r.stats.latency;
                    Row::new(vec![
                        Cell::from(r.kind),
                        Cell::from(r.name.clone()),
                        Cell::from(fmt_count(r.stats.calls())),
                        Cell::from(fmt_count(r.stats.yielded)),
                        Cell::from(fmt_count(r.stats.failed)),
                        Cell::from(fmt_count(r.stats.errors)),
                        Cell::from(fmt_ns(l.avg_ns())),
                        Cell::from(fmt_ns(l.max_ns())),
                    ])
                })
                .collect();
            (
                vec!["ROW", "CALLER PATH / YIELDER -> TARGET", "CALLS", "YIELDED", "FAILED", "ERR", "AVG", "MAX"],
                rows,
                vec![
                    Constraint::Length(4),
                    Constraint::Min(24),
                    Constraint::Length(7),
                    Constraint::Length(7),
                    Constraint::Length(7),
                    Constraint::Length(5),
                    Constraint::Length(9),
                    Constraint::Length(9),
                ],
            )
        }
    };
    let empty = rows.is_empty();
    let t = Table::new(rows, widths)
        .header(Row::new(header).style(head_style))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::new().borders(Borders::TOP));
    let mut state = TableState::default().with_selected(if empty { None } else { Some(app.selected) });
    StatefulWidget::render(t, area, buf, &mut state);
    if empty {
        let msg = match (&app.view, &app.profile.yield_to) {
            (View::Yield, None) => format!(
                "yield_to is not profiled: {}",
                app.profile.meta.yield_unavailable.as_deref().unwrap_or("no profile yet")
            ),
            (View::Yield, Some(y)) if y.total.calls() == 0 => {
                "no yield_to calls yet (no KVM vCPU has yielded)".to_string()
            }
            _ if app.profile.locks.is_empty() && app.view != View::Yield => {
                "waiting for lock contention...".to_string()
            }
            _ => "no rows match the filters".to_string(),
        };
        let inner = Rect { y: area.y.saturating_add(2), height: area.height.saturating_sub(2), ..area };
        Paragraph::new(msg).style(Style::new().fg(Color::DarkGray)).render(inner, buf);
    }
}

/// Histogram of a lock's waits in power-of-two bins.
fn histogram_bars(s: &Stats) -> Vec<(String, u64)> {
    let mut bins: Vec<(u64, u64)> = Vec::new();
    for (v, c) in s.buckets() {
        let b = 63 - v.max(1).leading_zeros() as u64;
        match bins.last_mut() {
            Some((lb, lc)) if *lb == b => *lc += c,
            _ => bins.push((b, c)),
        }
    }
    bins.into_iter().map(|(b, c)| (fmt_ns(1u64 << b.min(62)).replace(' ', ""), c)).collect()
}

fn detail(app: &App, l: &LockProfile, area: Rect, buf: &mut Buffer) {
    let title = format!(" {} [{}] @ {:#x} ", app.label(l), l.type_label(), l.addr);
    let block = Block::new().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    block.render(area, buf);
    let [left, right] = Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(inner);
    let mut lines: Vec<Line> = Vec::new();
    for c in l.callers.iter().take(4) {
        lines.push(Line::from(vec![
            Span::styled(
                format!("{:>7} {:>9} ", fmt_count(c.wait.count()), fmt_ns(c.wait.total_ns())),
                Style::new().fg(Color::Yellow),
            ),
            Span::raw(c.caller.clone()),
        ]));
    }
    lines.push(Line::from(Span::styled("held by (wait caused):", Style::new().add_modifier(Modifier::BOLD))));
    if l.owners.is_empty() {
        lines.push(Line::from("  no owner recorded for this lock type"));
    }
    for o in l.owners.iter().take(4) {
        let who = match o.kind {
            OwnerKind::Task => format!("{} {} {}", o.comm, o.tid, o.caller),
            OwnerKind::Readers => "readers".to_string(),
            OwnerKind::Unknown => "unknown".to_string(),
        };
        lines.push(Line::from(vec![
            Span::styled(
                format!("{:>7} {:>9} ", fmt_count(o.waits), fmt_ns(o.wait_caused_ns)),
                Style::new().fg(Color::Magenta),
            ),
            Span::raw(who),
        ]));
    }
    if let Some(top) = l.callers.first() {
        lines.push(Line::from(Span::styled("top stack:", Style::new().add_modifier(Modifier::BOLD))));
        for f in top.stack.iter() {
            lines.push(Line::from(format!("  {f}")));
        }
    }
    Paragraph::new(lines).render(left, buf);

    let [spark_area, hist_area] = Layout::vertical([Constraint::Length(3), Constraint::Min(3)]).areas(right);
    let hist = app.history_of(l);
    Sparkline::default()
        .block(
            Block::new().title(format!("wait per interval (max {})", fmt_ns(hist.iter().copied().max().unwrap_or(0)))),
        )
        .data(&hist)
        .style(Style::new().fg(Color::Cyan))
        .render(spark_area, buf);
    let bars: Vec<Bar> = histogram_bars(&l.wait)
        .into_iter()
        .map(|(label, c)| Bar::default().label(Line::from(label)).value(c))
        .collect();
    BarChart::default()
        .block(Block::new().title("wait histogram"))
        .data(BarGroup::default().bars(&bars))
        .bar_width(5)
        .bar_gap(1)
        .render(hist_area, buf);
}

fn footer(app: &App, area: Rect, buf: &mut Buffer) {
    let line = if app.editing_filter {
        Line::from(Span::styled(
            format!("filter: {}_   (Enter keeps, Esc clears)", app.filter),
            Style::new().fg(Color::Cyan),
        ))
    } else if let Some(s) = &app.status {
        Line::from(Span::styled(s.clone(), Style::new().fg(Color::Green)))
    } else {
        Line::from(
            "q quit  ? help  j/k move  Enter expand  s sort  / filter  t type  p pause  r reset  e export  Tab view",
        )
    };
    Paragraph::new(line).render(area, buf);
}

fn help(area: Rect, buf: &mut Buffer) {
    let shown: Vec<_> = BINDINGS.iter().filter(|b| !b.keys.is_empty()).collect();
    let h = (shown.len() as u16 + 2).min(area.height);
    let w = 64.min(area.width);
    let r = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    Clear.render(r, buf);
    let rows: Vec<Row> = shown.iter().map(|b| Row::new(vec![b.keys, b.help])).collect();
    let t = Table::new(rows, [Constraint::Length(18), Constraint::Min(10)])
        .block(Block::new().borders(Borders::ALL).title(" keys (any key closes) "));
    Widget::render(t, r, buf);
}

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let detail_lock = if self.expanded { self.selected_lock() } else { None };
        let detail_h = if detail_lock.is_some() { 12.min(area.height / 2) } else { 0 };
        let [head, body, det, foot] = Layout::vertical([
            Constraint::Length(2),
            Constraint::Min(3),
            Constraint::Length(detail_h),
            Constraint::Length(1),
        ])
        .areas(area);
        header(self, head, buf);
        table(self, body, buf);
        if let Some(l) = detail_lock {
            detail(self, l, det, buf);
        }
        footer(self, foot, buf);
        if self.help {
            help(area, buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use ratatui::{Terminal, backend::TestBackend};

    use super::*;
    use crate::{
        model::Profile,
        report::fixture,
        tui::{Action, Effect},
    };

    fn render(app: &App, w: u16, h: u16) -> Vec<String> {
        let mut buf = Buffer::empty(Rect::new(0, 0, w, h));
        app.render(buf.area, &mut buf);
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>().trim_end().to_string())
            .collect()
    }

    fn app_with(p: Profile) -> App {
        let mut app = App::new();
        app.on_profile(std::sync::Arc::new(p), 1.0);
        app
    }

    #[test]
    fn empty_data_renders_a_waiting_screen() {
        let lines = render(&App::new(), 80, 24);
        assert!(lines[0].starts_with("lockprof top"), "{lines:?}");
        assert!(lines[1].contains("drops: 0") && lines[1].contains("Locks") && lines[1].contains("sort: wait total"));
        assert!(lines.iter().any(|l| l.contains("waiting for lock contention")));
        assert!(lines[23].starts_with("q quit"));
        // Every view and the help overlay survive empty data too.
        let mut app = App::new();
        for a in [Action::Expand, Action::NextView, Action::NextView, Action::Help, Action::Down, Action::Last] {
            app.apply(a);
            render(&app, 80, 24);
        }
    }

    #[test]
    fn one_lock_row_with_its_numbers() {
        let mut p = fixture::profile();
        p.locks.truncate(1);
        let lines = render(&app_with(p), 100, 24);
        let row = lines.iter().find(|l| l.starts_with("tasklist_lock")).expect("row");
        assert!(row.contains("rwlock:W") && row.contains("100 us") && row.contains("90.0 us"), "{row}");
        assert!(row.trim_end().ends_with('-'), "no hold times: {row}");
        let head = lines.iter().find(|l| l.starts_with("LOCK")).expect("header");
        assert!(head.contains("HOLD") && head.contains("AVG") && head.contains("CONT/S"), "{head}");
    }

    #[test]
    fn many_locks_in_a_narrow_terminal() {
        let mut p = fixture::profile();
        let template = p.locks[1].clone();
        for i in 1..=200u64 {
            let mut l = template.clone();
            l.addr += i * 64;
            p.locks.push(l);
        }
        let mut app = app_with(p);
        let lines = render(&app, 60, 16);
        assert_eq!(lines.len(), 16);
        let pipe_rows: Vec<&String> = lines.iter().filter(|l| l.contains("mutex @ anon_")).collect();
        assert!(pipe_rows.len() >= 5, "{lines:#?}");
        // Locks with one name are told apart by their address, even when cut.
        let distinct: std::collections::BTreeSet<&str> =
            pipe_rows.iter().map(|l| l.split_whitespace().find(|w| w.contains('#')).unwrap_or("")).collect();
        assert_eq!(distinct.len(), pipe_rows.len(), "{pipe_rows:#?}");
        assert!(
            lines[3].starts_with("LOCK") && lines[3].contains("P99") && !lines[3].contains("HOLD"),
            "narrow: fewer columns"
        );
        app.apply(Action::Last);
        app.apply(Action::Expand);
        let lines = render(&app, 60, 16);
        assert!(lines.iter().any(|l| l.contains("wait histogram") || l.contains("top stack")), "{lines:#?}");
        // Tiny terminals must not panic.
        render(&app, 10, 3);
        render(&app, 1, 1);
    }

    #[test]
    fn yield_view_lists_paths_and_pairs_or_says_why_not() {
        let mut app = app_with(fixture::profile_with_yields());
        app.apply(Action::PrevView);
        assert_eq!(app.view, View::Yield);
        let screen = render(&app, 120, 20).join("\n");
        assert!(screen.contains("kvm_vcpu_yield_to <- kvm_sched_yield"), "{screen}");
        assert!(screen.contains("301 vcpu0 -> 302 vcpu1"), "{screen}");
        assert!(screen.contains("YIELDED"), "{screen}");
        assert!(screen.contains("yield_to 5 (3 yielded)"), "{screen}");
        let mut app = app_with(fixture::profile());
        app.apply(Action::PrevView);
        let screen = render(&app, 120, 20).join("\n");
        assert!(screen.contains("yield_to is not profiled: yield_to cannot be probed"), "{screen}");
        // Tiny terminals do not panic.
        render(&app, 10, 3);
    }

    #[test]
    fn labels_are_cut_in_the_middle_keeping_the_instance() {
        assert_eq!(fit("mutex @ anon_pipe_write #a1b2c0", 21), "mutex @ anon_…#a1b2c0");
        assert_eq!(fit("short", 21), "short");
        assert_eq!(fit("tasklist_lock (no suffix here at all)", 10), "tasklist_l");
    }

    #[test]
    fn huge_numbers_use_human_units() {
        let mut p = fixture::profile();
        p.locks[0].wait.record(u64::MAX / 4);
        let lines = render(&app_with(p), 100, 24);
        let row = lines.iter().find(|l| l.starts_with("tasklist_lock")).expect("row");
        assert!(row.contains("146 y"), "huge waits in years, not truncated digits: {row}");
    }

    #[test]
    fn help_lists_every_binding() {
        let mut app = App::new();
        app.apply(Action::Help);
        let text = render(&app, 80, 24).join("\n");
        for b in BINDINGS.iter().filter(|b| !b.keys.is_empty()) {
            assert!(text.contains(b.keys), "help lacks {}", b.keys);
        }
    }

    #[test]
    fn test_backend_drives_the_whole_app() {
        use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let mut term = Terminal::new(TestBackend::new(80, 24)).expect("terminal");
        let mut app = app_with(fixture::profile());
        let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
        let script = [
            (KeyCode::Char('j'), Effect::None),
            (KeyCode::Enter, Effect::None),
            (KeyCode::Char('s'), Effect::None),
            (KeyCode::Char('/'), Effect::None),
            (KeyCode::Char('p'), Effect::None),
            (KeyCode::Char('i'), Effect::None),
            (KeyCode::Enter, Effect::None),
            (KeyCode::Char('r'), Effect::Reset),
            (KeyCode::Char('e'), Effect::Export),
            (KeyCode::Char('q'), Effect::Quit),
        ];
        for (code, want) in script {
            assert_eq!(app.on_key(key(code)), want, "{code:?}");
            term.draw(|f| f.render_widget(&app, f.area())).expect("draw");
        }
        let text: String = term.backend().buffer().content().iter().map(|c| c.symbol()).collect();
        assert!(text.contains("/pi"), "filter shown");
        assert!(text.contains("sort: contended"), "sort shown");
        assert!(text.contains("anon_pipe_write"), "filter kept the pipe lock");
        assert!(!text.contains("tasklist_lock (rwlock"), "filter hid tasklist_lock");
    }

    #[test]
    fn header_shows_every_loss_and_no_bookkeeping() {
        let mut p = fixture::profile();
        p.meta.drops.losses.recursion_misses = 3;
        p.meta.drops.bookkeeping.stack_reused = 5;
        p.meta.drops.bookkeeping.agg_map_full = 4;
        let lines = render(&app_with(p), 100, 24);
        assert!(lines[1].starts_with("drops: stack_failed=2 recursion_misses=3  "), "{lines:?}");
    }
}
