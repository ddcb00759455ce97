//! TUI state. Changes only in [`App::apply`], [`App::on_key`] and
//! [`App::on_profile`]; rendering (ui.rs) is a pure function of it.

use std::collections::{HashMap, VecDeque};

use profiler_common::{LockMode, LockType};
use ratatui::crossterm::event::{KeyCode, KeyEvent};

use super::keys::{Action, action_for};
use crate::{
    model::{CallerProfile, LockProfile, Profile, TaskProfile, YieldStats},
    report::SortKey,
};

/// Which table is shown.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum View {
    /// One row per lock.
    Locks,
    /// One row per (lock, caller stack).
    Callers,
    /// One row per thread.
    Tasks,
    /// KVM directed yield: caller paths, then (yielder, target) pairs.
    Yield,
}

/// A row of the yield_to view.
#[derive(Clone, Debug)]
pub struct YieldRow<'a> {
    /// `path` (a caller stack) or `pair` (yielder -> target).
    pub kind: &'static str,
    /// The caller path, or `tid comm -> tid comm`.
    pub name: String,
    /// Outcomes and latency.
    pub stats: &'a YieldStats,
}

impl View {
    /// All views, in tab order.
    pub const ALL: [View; 4] = [View::Locks, View::Callers, View::Tasks, View::Yield];

    /// Tab title.
    pub fn title(self) -> &'static str {
        match self {
            View::Locks => "Locks",
            View::Callers => "Callers",
            View::Tasks => "Tasks",
            View::Yield => "yield_to",
        }
    }
}

/// What the runner must do after an action (the app itself does no I/O).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing.
    None,
    /// Leave the TUI.
    Quit,
    /// Tell the aggregator to forget everything.
    Reset,
    /// Save the current profile as a recording.
    Export,
}

/// Sort columns, in `s` order.
pub const SORTS: [SortKey; 5] =
    [SortKey::WaitTotal, SortKey::Contended, SortKey::WaitAvg, SortKey::WaitMax, SortKey::WaitP99];

/// Lock types `t` cycles through (None = all).
pub const TYPE_FILTERS: [Option<LockType>; 6] = [
    None,
    Some(LockType::Mutex),
    Some(LockType::Rwsem),
    Some(LockType::Rwlock),
    Some(LockType::Spinlock),
    Some(LockType::PercpuRwsem),
];

/// Intervals of history kept per lock.
pub const HISTORY: usize = 120;

type Key = (u64, LockType, LockMode);

fn key(l: &LockProfile) -> Key {
    (l.addr, l.lock_type, l.mode)
}

/// The TUI's state.
#[derive(Debug)]
pub struct App {
    /// Current table.
    pub view: View,
    /// Latest profile.
    pub profile: Profile,
    /// Sort column (index into [`SORTS`]).
    pub sort: usize,
    /// Selected row.
    pub selected: usize,
    /// Detail pane shown.
    pub expanded: bool,
    /// Name/caller substring filter.
    pub filter: String,
    /// Typing into the filter.
    pub editing_filter: bool,
    /// Lock type filter (index into [`TYPE_FILTERS`]).
    pub type_filter: usize,
    /// Display frozen.
    pub paused: bool,
    /// Help overlay shown.
    pub help: bool,
    /// Last status message (export result, reset).
    pub status: Option<String>,
    /// Contentions per second over the last interval.
    pub rate: f64,
    /// Per-lock contentions/s over the last interval.
    pub per_sec: HashMap<Key, f64>,
    /// Per-lock wait time per interval, oldest first.
    pub history: HashMap<Key, VecDeque<u64>>,
    /// Seconds since start.
    pub elapsed_s: f64,
    prev: HashMap<Key, (u64, u64)>,
    prev_events: u64,
    prev_elapsed: f64,
}

impl App {
    /// An empty app.
    pub fn new() -> App {
        App {
            view: View::Locks,
            profile: Profile::default(),
            sort: 0,
            selected: 0,
            expanded: false,
            filter: String::new(),
            editing_filter: false,
            type_filter: 0,
            paused: false,
            help: false,
            status: None,
            rate: 0.0,
            per_sec: HashMap::new(),
            history: HashMap::new(),
            elapsed_s: 0.0,
            prev: HashMap::new(),
            prev_events: 0,
            prev_elapsed: 0.0,
        }
    }

    /// The current sort key.
    pub fn sort_key(&self) -> SortKey {
        SORTS[self.sort % SORTS.len()]
    }

    /// The current type filter.
    pub fn type_filter(&self) -> Option<LockType> {
        TYPE_FILTERS[self.type_filter % TYPE_FILTERS.len()]
    }

    /// A new snapshot arrived (ignored while paused, except the clock).
    pub fn on_profile(&mut self, p: Profile, elapsed_s: f64) {
        self.elapsed_s = elapsed_s;
        if self.paused {
            // Frozen display, but keep the baselines current so the first
            // rate after resuming covers one interval, not the whole pause.
            for l in &p.locks {
                self.prev.insert(key(l), (l.wait.count(), l.wait.total_ns()));
            }
            self.prev_events = p.contended();
            self.prev_elapsed = elapsed_s;
            return;
        }
        let dt = (elapsed_s - self.prev_elapsed).max(1e-3);
        let events = p.contended();
        self.rate = events.saturating_sub(self.prev_events) as f64 / dt;
        self.per_sec.clear();
        for l in &p.locks {
            let k = key(l);
            let (c0, w0) = self.prev.get(&k).copied().unwrap_or((0, 0));
            let (c, w) = (l.wait.count(), l.wait.total_ns());
            self.per_sec.insert(k, c.saturating_sub(c0) as f64 / dt);
            let h = self.history.entry(k).or_default();
            h.push_back(w.saturating_sub(w0));
            while h.len() > HISTORY {
                h.pop_front();
            }
            self.prev.insert(k, (c, w));
        }
        self.prev_events = events;
        self.prev_elapsed = elapsed_s;
        self.profile = p;
        self.clamp_selection();
    }

    fn matches_text(&self, l: &LockProfile, c: Option<&CallerProfile>) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        let f = self.filter.to_lowercase();
        let hit = |s: &str| s.to_lowercase().contains(&f);
        hit(l.display_name())
            || hit(&l.class)
            || match c {
                Some(c) => hit(&c.caller),
                None => l.callers.iter().any(|c| hit(&c.caller)),
            }
    }

    fn type_ok(&self, l: &LockProfile) -> bool {
        self.type_filter().is_none_or(|t| t == l.lock_type)
    }

    /// Locks shown, filtered and sorted.
    pub fn lock_rows(&self) -> Vec<&LockProfile> {
        let k = self.sort_key();
        let mut v: Vec<&LockProfile> =
            self.profile.locks.iter().filter(|l| self.type_ok(l) && self.matches_text(l, None)).collect();
        v.sort_by(|a, b| k.value(&b.wait).cmp(&k.value(&a.wait)).then(a.addr.cmp(&b.addr)));
        v
    }

    /// (lock, caller) rows shown, filtered and sorted.
    pub fn caller_rows(&self) -> Vec<(&LockProfile, &CallerProfile)> {
        let k = self.sort_key();
        let mut v: Vec<_> = self
            .profile
            .locks
            .iter()
            .filter(|l| self.type_ok(l))
            .flat_map(|l| l.callers.iter().map(move |c| (l, c)))
            .filter(|(l, c)| self.matches_text(l, Some(c)))
            .collect();
        v.sort_by(|a, b| k.value(&b.1.wait).cmp(&k.value(&a.1.wait)).then(a.1.caller.cmp(&b.1.caller)));
        v
    }

    /// Tasks shown, filtered by comm and sorted.
    pub fn task_rows(&self) -> Vec<&TaskProfile> {
        let k = self.sort_key();
        let f = self.filter.to_lowercase();
        let mut v: Vec<&TaskProfile> =
            self.profile.tasks.iter().filter(|t| f.is_empty() || t.comm.to_lowercase().contains(&f)).collect();
        v.sort_by(|a, b| k.value(&b.wait).cmp(&k.value(&a.wait)).then(a.tid.cmp(&b.tid)));
        v
    }

    /// yield_to rows: caller paths, then pairs, each sorted by the sort key
    /// on latency (`contended` = calls), filtered by the text filter.
    pub fn yield_rows(&self) -> Vec<YieldRow<'_>> {
        let Some(y) = &self.profile.yield_to else { return Vec::new() };
        let k = self.sort_key();
        let f = self.filter.to_lowercase();
        let mut callers: Vec<YieldRow<'_>> =
            y.callers.iter().map(|c| YieldRow { kind: "path", name: c.path.clone(), stats: &c.stats }).collect();
        let mut pairs: Vec<YieldRow<'_>> = y
            .pairs
            .iter()
            .map(|p| {
                let target = if p.target_tid == 0 {
                    "[unknown]".to_string()
                } else {
                    format!("{} {}", p.target_tid, p.target_comm)
                };
                YieldRow { kind: "pair", name: format!("{} {} -> {target}", p.tid, p.comm), stats: &p.stats }
            })
            .collect();
        for v in [&mut callers, &mut pairs] {
            v.retain(|r| f.is_empty() || r.name.to_lowercase().contains(&f));
            v.sort_by(|a, b| k.value(&b.stats.latency).cmp(&k.value(&a.stats.latency)).then(a.name.cmp(&b.name)));
        }
        callers.extend(pairs);
        callers
    }

    /// Rows in the current view.
    pub fn row_count(&self) -> usize {
        match self.view {
            View::Locks => self.lock_rows().len(),
            View::Callers => self.caller_rows().len(),
            View::Tasks => self.task_rows().len(),
            View::Yield => self.yield_rows().len(),
        }
    }

    /// The lock whose detail is shown (selected lock, or the lock of the selected caller).
    pub fn selected_lock(&self) -> Option<&LockProfile> {
        match self.view {
            View::Locks => self.lock_rows().get(self.selected).copied(),
            View::Callers => self.caller_rows().get(self.selected).map(|(l, _)| *l),
            View::Tasks | View::Yield => None,
        }
    }

    /// Wait-per-interval history of a lock.
    pub fn history_of(&self, l: &LockProfile) -> Vec<u64> {
        self.history.get(&key(l)).map(|h| h.iter().copied().collect()).unwrap_or_default()
    }

    /// Contentions/s of a lock over the last interval.
    pub fn rate_of(&self, l: &LockProfile) -> f64 {
        self.per_sec.get(&key(l)).copied().unwrap_or(0.0)
    }

    fn clamp_selection(&mut self) {
        let n = self.row_count();
        if self.selected >= n {
            self.selected = n.saturating_sub(1);
        }
    }

    /// Forget derived history (after a reset).
    pub fn clear_history(&mut self) {
        self.history.clear();
        self.prev.clear();
        self.per_sec.clear();
        self.prev_events = 0;
    }

    /// A key press.
    pub fn on_key(&mut self, e: KeyEvent) -> Effect {
        if self.editing_filter {
            match e.code {
                KeyCode::Enter => self.editing_filter = false,
                KeyCode::Esc => {
                    self.filter.clear();
                    self.editing_filter = false;
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if self.filter.chars().count() < 64 => self.filter.push(c),
                _ => {}
            }
            self.selected = 0;
            return Effect::None;
        }
        if self.help {
            // Any key (Esc included) just closes the help.
            self.help = false;
            return Effect::None;
        }
        match action_for(&e) {
            Some(a) => self.apply(a),
            None => Effect::None,
        }
    }

    /// Applies an action.
    pub fn apply(&mut self, a: Action) -> Effect {
        let n = self.row_count();
        match a {
            Action::Quit => return Effect::Quit,
            Action::Up => self.selected = self.selected.saturating_sub(1),
            Action::Down => self.selected = (self.selected + 1).min(n.saturating_sub(1)),
            Action::First => self.selected = 0,
            Action::Last => self.selected = n.saturating_sub(1),
            Action::Expand => self.expanded = !self.expanded,
            Action::CycleSort => self.sort = (self.sort + 1) % SORTS.len(),
            Action::Filter => self.editing_filter = true,
            Action::CycleType => {
                self.type_filter = (self.type_filter + 1) % TYPE_FILTERS.len();
                self.selected = 0;
            }
            Action::Pause => self.paused = !self.paused,
            Action::Reset => {
                self.clear_history();
                self.status = Some("statistics reset".into());
                return Effect::Reset;
            }
            Action::Export => return Effect::Export,
            Action::Help => self.help = !self.help,
            Action::NextView | Action::PrevView => {
                let i = View::ALL.iter().position(|v| *v == self.view).unwrap_or(0);
                let step = if a == Action::NextView { 1 } else { View::ALL.len() - 1 };
                self.view = View::ALL[(i + step) % View::ALL.len()];
                self.selected = 0;
            }
        }
        self.clamp_selection();
        Effect::None
    }
}

impl Default for App {
    fn default() -> Self {
        App::new()
    }
}

#[cfg(test)]
mod tests {
    use ratatui::crossterm::event::KeyModifiers;

    use super::*;
    use crate::report::fixture;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn navigation_sort_filter_and_views() {
        let mut app = App::new();
        app.on_profile(fixture::profile(), 1.0);
        assert_eq!(app.lock_rows()[0].name.as_deref(), Some("tasklist_lock"));
        assert_eq!(app.apply(Action::Down), Effect::None);
        assert_eq!(app.selected, 1);
        app.apply(Action::Down);
        assert_eq!(app.selected, 1, "clamped at the last row");
        app.apply(Action::First);
        assert_eq!(app.selected, 0);
        // Sort by average wait: the pipe mutex (800 ns) stays below tasklist_lock (20 us).
        while app.sort_key() != SortKey::WaitAvg {
            app.apply(Action::CycleSort);
        }
        assert_eq!(app.lock_rows()[0].name.as_deref(), Some("tasklist_lock"));
        // Type filter: mutex only.
        while app.type_filter() != Some(LockType::Mutex) {
            app.apply(Action::CycleType);
        }
        assert_eq!(app.lock_rows().len(), 1);
        assert_eq!(app.lock_rows()[0].lock_type, LockType::Mutex);
        app.type_filter = 0;
        // Text filter through keys, matching a caller.
        app.on_key(key(KeyCode::Char('/')));
        for c in "release".chars() {
            app.on_key(key(KeyCode::Char(c)));
        }
        app.on_key(key(KeyCode::Enter));
        assert!(!app.editing_filter);
        assert_eq!(app.lock_rows().len(), 1);
        assert_eq!(app.caller_rows().len(), 1);
        app.on_key(key(KeyCode::Char('/')));
        app.on_key(key(KeyCode::Esc));
        assert!(app.filter.is_empty());
        app.apply(Action::NextView);
        assert_eq!(app.view, View::Callers);
        assert_eq!(app.row_count(), 3);
        app.apply(Action::PrevView);
        app.apply(Action::PrevView);
        assert_eq!(app.view, View::Yield, "tabs wrap around");
        app.apply(Action::PrevView);
        assert_eq!(app.view, View::Tasks);
    }

    #[test]
    fn pause_freezes_and_rates_come_from_deltas() {
        let mut app = App::new();
        let p = fixture::profile();
        app.on_profile(p.clone(), 1.0);
        let first = app.rate;
        app.apply(Action::Pause);
        let mut more = p.clone();
        more.locks[1].wait.record(1_000);
        app.on_profile(more.clone(), 2.0);
        assert_eq!(app.profile.contended(), p.contended(), "paused: data frozen");
        assert_eq!(app.elapsed_s, 2.0, "the clock still runs");
        app.apply(Action::Pause);
        let mut again = more.clone();
        again.locks[1].wait.record(1_000);
        app.on_profile(again, 3.0);
        assert_eq!(app.rate, 1.0, "one new contention over the last second, not the pause");
        assert!(first > 0.0);
        let pipe = app.profile.locks[1].clone();
        assert_eq!(app.history_of(&pipe).len(), 2);
        assert_eq!(app.apply(Action::Reset), Effect::Reset);
        assert!(app.history_of(&pipe).is_empty());
    }

    #[test]
    fn help_closes_on_any_key_without_quitting() {
        let mut app = App::new();
        app.apply(Action::Help);
        assert_eq!(app.on_key(key(KeyCode::Esc)), Effect::None);
        assert!(!app.help);
        assert_eq!(app.on_key(key(KeyCode::Esc)), Effect::Quit);
    }
}
