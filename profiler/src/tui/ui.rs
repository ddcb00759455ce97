//! Rendering: a pure function of [`App`] (no I/O, no locks, no panics on
//! empty data or huge numbers). This file lays out the frame (status lines,
//! the current view's table from `view/`, detail pane, footer, help).

use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Bar, BarChart, BarGroup, Block, Borders, Clear, Paragraph, Row, Sparkline, Table, Widget},
};

use super::{
    app::{App, View},
    keys::{self, BINDINGS},
    view,
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
    if let Some(id) = app.showing_incident() {
        l1.push(Span::styled(
            format!("  INCIDENT {id} (i: live)"),
            Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD),
        ));
    } else if app.paused {
        l1.push(Span::styled("  PAUSED", Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)));
    }
    if let Some(log) = app.incidents.as_ref().filter(|_| app.showing_incident().is_none()) {
        let (text, color) = match (log.capturing, log.written.len()) {
            (true, _) => ("  CAPTURING INCIDENT".to_string(), Color::Red),
            (false, 0) => ("  triggers armed".to_string(), Color::Green),
            (false, n) => (format!("  INCIDENTS {n} (i opens the last)"), Color::Magenta),
        };
        l1.push(Span::styled(text, Style::new().fg(color).add_modifier(Modifier::BOLD)));
    }
    let losses: Vec<String> = m.drops.lost().map(|c| format!("{}={}", c.name, c.value)).collect();
    let drops = if losses.is_empty() {
        Span::styled("drops: 0", Style::new().fg(Color::Green))
    } else {
        Span::styled(format!("drops: {}", losses.join(" ")), Style::new().fg(Color::Red).add_modifier(Modifier::BOLD))
    };
    // The views, sort and filter first: they are what the keys change, and
    // a long list of losses must not push them off a narrow screen.
    let mut l2 = Vec::new();
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
    l2.extend([Span::raw("  "), drops]);
    Paragraph::new(vec![Line::from(l1), Line::from(l2)]).render(area, buf);
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
            OwnerKind::Writer => "a writer (not named by the lock)".to_string(),
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
    } else if let Some(s) = app.status() {
        Line::from(Span::styled(s.to_string(), Style::new().fg(Color::Green)))
    } else {
        Line::from(keys::footer())
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
        view::render(self, body, buf);
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
        let lines = render(&app_with(p), 140, 24);
        assert!(lines[1].ends_with("  drops: stack_failed=2 recursion_misses=3"), "{lines:?}");
    }

    #[test]
    fn many_losses_never_hide_the_sort_and_filter() {
        let mut p = fixture::profile();
        let l = &mut p.meta.drops.losses;
        (l.reentered, l.stale_spin_discarded, l.recursion_misses, l.ringbuf_full) = (10, 92, 15, 7);
        let mut app = app_with(p);
        for k in ['/', 'p', 'i'] {
            use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
            app.on_key(KeyEvent::new(KeyCode::Char(k), KeyModifiers::NONE));
        }
        let lines = render(&app, 80, 24);
        assert!(lines[1].contains("sort: wait total v  /pi  drops: "), "{lines:?}");
    }
}
