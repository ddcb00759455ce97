//! TUI state. Changes only in [`App::apply`], [`App::on_key`],
//! [`App::on_profile`] and [`App::on_export`]; rendering (ui.rs, view/) is a
//! pure function of it.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    fmt,
    path::PathBuf,
    sync::Arc,
};

use profiler_common::LockType;

use crate::incident::IncidentLog;
use ratatui::crossterm::event::{KeyCode, KeyEvent};

use super::keys::{Action, action_for};
use crate::{
    model::{CallerProfile, CgroupProfile, LockKey, LockProfile, Profile, TaskProfile, YieldStats, placeholders},
    pipeline::delta::Deltas,
    query::{Query, SortKey},
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
    /// One row per cgroup (service, container) of the waiting tasks.
    Cgroups,
    /// KVM directed yield: caller paths, then (yielder, target) pairs.
    Yield,
}

/// A row of the yield_to view.
#[derive(Clone, Debug)]
pub struct YieldRow {
    /// A caller path or a (yielder, target) pair.
    pub kind: YieldRowKind,
    /// The caller path, or `tid comm -> tid comm`.
    pub name: String,
    /// Outcomes and latency.
    pub stats: YieldStats,
}

/// What a yield_to row counts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum YieldRowKind {
    /// One caller stack of yield_to.
    Path,
    /// One (yielder, target) pair of threads.
    Pair,
}

impl fmt::Display for YieldRowKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            YieldRowKind::Path => "path",
            YieldRowKind::Pair => "pair",
        })
    }
}

/// The rows of every view, built when the profile or a filter changes,
/// never while drawing: indices into the profile's tables.
#[derive(Clone, Debug, Default)]
pub struct Rows {
    /// Locks view: indices into `profile.locks`.
    pub locks: Vec<usize>,
    /// Callers view: (lock, caller) indices.
    pub callers: Vec<(usize, usize)>,
    /// Tasks view: indices into `profile.tasks`.
    pub tasks: Vec<usize>,
    /// cgroups view: indices into `profile.cgroups`.
    pub cgroups: Vec<usize>,
    /// yield_to view: caller paths, then pairs.
    pub yields: Vec<YieldRow>,
    /// A label per lock address that tells locks with the same name apart.
    pub labels: BTreeMap<u64, String>,
}

impl View {
    /// All views, in tab order.
    pub const ALL: [View; 5] = [View::Locks, View::Callers, View::Tasks, View::Cgroups, View::Yield];

    /// Tab title.
    pub fn title(self) -> &'static str {
        match self {
            View::Locks => "Locks",
            View::Callers => "Callers",
            View::Tasks => "Tasks",
            View::Cgroups => "cgroups",
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
pub const SORTS: [SortKey; 5] = SortKey::ALL;

/// Lock types `t` cycles through (None = all).
pub const TYPE_FILTERS: [Option<LockType>; 8] = [
    None,
    Some(LockType::Mutex),
    Some(LockType::Rwsem),
    Some(LockType::Rwlock),
    Some(LockType::Spinlock),
    Some(LockType::PercpuRwsem),
    Some(LockType::Futex),
    Some(LockType::FutexPi),
];

/// Intervals of history kept per lock.
pub const HISTORY: usize = 120;

/// The TUI's state.
#[derive(Debug)]
pub struct App {
    /// Current table.
    pub view: View,
    /// Latest profile.
    pub profile: Arc<Profile>,
    /// Rows of every view for the profile and filters.
    pub rows: Rows,
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
    status: Option<String>,
    /// Contentions per second over the last interval.
    pub rate: f64,
    /// Per-lock contentions/s over the last interval.
    pub per_sec: HashMap<LockKey, f64>,
    /// Per-lock wait time per interval, oldest first.
    pub history: HashMap<LockKey, VecDeque<u64>>,
    /// Seconds since start.
    pub elapsed_s: f64,
    /// What each profile added per lock.
    deltas: Deltas,
    prev_elapsed: f64,
    /// The incidents the session's triggers wrote (None: no triggers).
    pub incidents: Option<Arc<IncidentLog>>,
    /// The live profile put aside while an incident is shown (`i`).
    live: Option<Arc<Profile>>,
}

impl App {
    /// An empty app.
    pub fn new() -> App {
        App {
            view: View::Locks,
            profile: Arc::new(Profile::default()),
            rows: Rows::default(),
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
            deltas: Deltas::new(),
            prev_elapsed: 0.0,
            incidents: None,
            live: None,
        }
    }

    /// The incident log changed.
    pub fn on_incidents(&mut self, log: Arc<IncidentLog>) {
        self.incidents = Some(log);
    }

    /// The id of the incident shown instead of the live data, if one is.
    pub fn showing_incident(&self) -> Option<&str> {
        self.live.as_ref()?;
        self.profile.incident.as_ref().map(|i| i.id.as_str())
    }

    /// `i`: shows the latest incident (frozen), or goes back to live.
    fn toggle_incident(&mut self) {
        if let Some(live) = self.live.take() {
            self.profile = live;
            self.paused = false;
            self.status = Some("live".into());
        } else {
            match self.incidents.as_ref().and_then(|l| l.last.clone()) {
                Some(incident) => {
                    self.live = Some(std::mem::replace(&mut self.profile, incident));
                    self.paused = true;
                    self.status = self.showing_incident().map(|id| format!("incident {id}: i goes back to live"));
                }
                None => {
                    self.status = Some(match &self.incidents {
                        Some(_) => "no incident yet".into(),
                        None => "no incident triggers: start top with --trigger".into(),
                    })
                }
            }
        }
        self.selected = 0;
        self.refresh_rows();
    }

    /// The current sort key.
    pub fn sort_key(&self) -> SortKey {
        SORTS[self.sort % SORTS.len()]
    }

    /// The current type filter.
    pub fn type_filter(&self) -> Option<LockType> {
        TYPE_FILTERS[self.type_filter % TYPE_FILTERS.len()]
    }

    /// A new profile arrived (ignored while paused, except the clock).
    pub fn on_profile(&mut self, p: Arc<Profile>, elapsed_s: f64) {
        self.elapsed_s = elapsed_s;
        let deltas = self.deltas.next(&p);
        if self.paused {
            // Frozen display, but the deltas are taken so the first rate
            // after resuming covers one interval, not the whole pause.
            self.prev_elapsed = elapsed_s;
            if self.live.is_some() {
                self.live = Some(p);
            }
            return;
        }
        let dt = (elapsed_s - self.prev_elapsed).max(1e-3);
        self.rate = deltas.iter().map(|d| d.totals.wait.count).sum::<u64>() as f64 / dt;
        self.per_sec.clear();
        for d in &deltas {
            self.per_sec.insert(d.key, d.totals.wait.count as f64 / dt);
            let h = self.history.entry(d.key).or_default();
            h.push_back(d.totals.wait.sum_ns);
            while h.len() > HISTORY {
                h.pop_front();
            }
        }
        self.prev_elapsed = elapsed_s;
        self.profile = p;
        self.refresh_rows();
    }

    /// The query of the current sort and filters.
    pub fn query(&self) -> Query {
        Query {
            sort: self.sort_key(),
            types: self.type_filter().into_iter().collect(),
            text: self.filter.clone(),
            ..Query::default()
        }
    }

    /// Rebuilds the rows of every view (profile, sort or filters changed).
    pub fn refresh_rows(&mut self) {
        let p = &self.profile;
        let q = self.query();
        let mut yields: Vec<YieldRow> = q
            .yield_callers(p)
            .into_iter()
            .map(|c| YieldRow { kind: YieldRowKind::Path, name: c.path.clone(), stats: c.stats.clone() })
            .collect();
        yields.extend(q.yield_pairs(p).into_iter().map(|pr| {
            let target = if pr.target_tid == 0 {
                placeholders::UNKNOWN_TARGET.to_string()
            } else {
                format!("{} {}", pr.target_tid, pr.target_comm)
            };
            YieldRow {
                kind: YieldRowKind::Pair,
                name: format!("{} {} -> {target}", pr.tid, pr.comm),
                stats: pr.stats.clone(),
            }
        }));
        self.rows = Rows {
            locks: q.lock_indices(p),
            callers: q.caller_indices(p),
            tasks: q.task_indices(p),
            cgroups: q.cgroup_indices(p),
            yields,
            labels: p.labels(),
        };
        self.clamp_selection();
    }

    /// The last status message (export result, reset).
    pub fn status(&self) -> Option<&str> {
        self.status.as_deref()
    }

    /// The runner saved (or failed to save) the recording [`Effect::Export`] asked for.
    pub fn on_export(&mut self, saved: Result<PathBuf, impl fmt::Display>) {
        self.status = Some(match saved {
            Ok(p) => format!("exported {} (lockprof report --input {})", p.display(), p.display()),
            Err(e) => format!("export failed: {e}"),
        });
    }

    /// The label of a lock (its name, with the address where names collide).
    pub fn label<'a>(&'a self, l: &'a LockProfile) -> &'a str {
        self.rows.labels.get(&l.addr).map_or(l.display_name(), String::as_str)
    }

    /// Locks shown, in order.
    pub fn lock_rows(&self) -> Vec<&LockProfile> {
        self.rows.locks.iter().map(|&i| &self.profile.locks[i]).collect()
    }

    /// (lock, caller) rows shown, in order.
    pub fn caller_rows(&self) -> Vec<(&LockProfile, &CallerProfile)> {
        self.rows.callers.iter().map(|&(i, j)| (&self.profile.locks[i], &self.profile.locks[i].callers[j])).collect()
    }

    /// Tasks shown, in order.
    pub fn task_rows(&self) -> Vec<&TaskProfile> {
        self.rows.tasks.iter().map(|&i| &self.profile.tasks[i]).collect()
    }

    /// cgroups view rows.
    pub fn cgroup_rows(&self) -> Vec<&CgroupProfile> {
        self.rows.cgroups.iter().map(|&i| &self.profile.cgroups[i]).collect()
    }

    /// yield_to rows: caller paths, then pairs.
    pub fn yield_rows(&self) -> &[YieldRow] {
        &self.rows.yields
    }

    /// Rows in the current view.
    pub fn row_count(&self) -> usize {
        match self.view {
            View::Locks => self.rows.locks.len(),
            View::Callers => self.rows.callers.len(),
            View::Tasks => self.rows.tasks.len(),
            View::Cgroups => self.rows.cgroups.len(),
            View::Yield => self.rows.yields.len(),
        }
    }

    /// The lock whose detail is shown (selected lock, or the lock of the selected caller).
    pub fn selected_lock(&self) -> Option<&LockProfile> {
        match self.view {
            View::Locks => self.rows.locks.get(self.selected).map(|&i| &self.profile.locks[i]),
            View::Callers => self.rows.callers.get(self.selected).map(|&(i, _)| &self.profile.locks[i]),
            View::Tasks | View::Cgroups | View::Yield => None,
        }
    }

    /// Wait-per-interval history of a lock.
    pub fn history_of(&self, l: &LockProfile) -> Vec<u64> {
        self.history.get(&l.key()).map(|h| h.iter().copied().collect()).unwrap_or_default()
    }

    /// Contentions/s of a lock over the last interval.
    pub fn rate_of(&self, l: &LockProfile) -> f64 {
        self.per_sec.get(&l.key()).copied().unwrap_or(0.0)
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
        self.deltas.clear();
        self.per_sec.clear();
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
            self.refresh_rows();
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
            Action::CycleSort => {
                self.sort = (self.sort + 1) % SORTS.len();
                self.refresh_rows();
            }
            Action::Filter => self.editing_filter = true,
            Action::CycleType => {
                self.type_filter = (self.type_filter + 1) % TYPE_FILTERS.len();
                self.selected = 0;
                self.refresh_rows();
            }
            Action::Pause if self.live.is_none() => self.paused = !self.paused,
            Action::Pause => {}
            Action::Incident => self.toggle_incident(),
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
        app.on_profile(Arc::new(fixture::profile()), 1.0);
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
        app.refresh_rows();
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
        assert_eq!(app.view, View::Cgroups);
        app.apply(Action::PrevView);
        assert_eq!(app.view, View::Tasks);
    }

    #[test]
    fn pause_freezes_and_rates_come_from_deltas() {
        let mut app = App::new();
        let p = fixture::profile();
        app.on_profile(Arc::new(p.clone()), 1.0);
        let first = app.rate;
        app.apply(Action::Pause);
        let mut more = p.clone();
        more.locks[1].wait.record(1_000);
        app.on_profile(Arc::new(more.clone()), 2.0);
        assert_eq!(app.profile.contended(), p.contended(), "paused: data frozen");
        assert_eq!(app.elapsed_s, 2.0, "the clock still runs");
        app.apply(Action::Pause);
        let mut again = more.clone();
        again.locks[1].wait.record(1_000);
        app.on_profile(Arc::new(again), 3.0);
        assert_eq!(app.rate, 1.0, "one new contention over the last second, not the pause");
        assert!(first > 0.0);
        let pipe = app.profile.locks[1].clone();
        assert_eq!(app.history_of(&pipe).len(), 2);
        assert_eq!(app.apply(Action::Reset), Effect::Reset);
        assert!(app.history_of(&pipe).is_empty());
    }

    #[test]
    fn export_outcomes_become_the_status_line() {
        let mut app = App::new();
        assert_eq!(app.status(), None);
        app.on_export(Ok::<_, String>(PathBuf::from("t.lockprof")));
        assert_eq!(app.status(), Some("exported t.lockprof (lockprof report --input t.lockprof)"));
        app.on_export(Err("disk full"));
        assert_eq!(app.status(), Some("export failed: disk full"));
        app.apply(Action::Reset);
        assert_eq!(app.status(), Some("statistics reset"));
    }

    #[test]
    fn help_closes_on_any_key_without_quitting() {
        let mut app = App::new();
        app.apply(Action::Help);
        assert_eq!(app.on_key(key(KeyCode::Esc)), Effect::None);
        assert!(!app.help);
        assert_eq!(app.on_key(key(KeyCode::Esc)), Effect::Quit);
    }

    #[test]
    fn i_opens_the_latest_incident_frozen_and_goes_back_to_live() {
        let mut app = App::new();
        app.apply(Action::Incident);
        assert_eq!(app.status(), Some("no incident triggers: start top with --trigger"));
        app.on_incidents(Arc::new(IncidentLog::default()));
        app.apply(Action::Incident);
        assert_eq!(app.status(), Some("no incident yet"));
        let live = fixture::profile();
        app.on_profile(Arc::new(live.clone()), 1.0);
        let mut incident = fixture::profile();
        incident.locks.truncate(1);
        incident.incident = Some(crate::model::IncidentInfo { id: "incident-x".into(), ..Default::default() });
        app.on_incidents(Arc::new(IncidentLog { last: Some(Arc::new(incident)), ..IncidentLog::default() }));
        app.apply(Action::Incident);
        assert_eq!(app.showing_incident(), Some("incident-x"));
        assert_eq!(app.profile.locks.len(), 1);
        // Live profiles keep coming while it is shown; `p` does not unfreeze it.
        app.on_profile(Arc::new(live.clone()), 2.0);
        app.apply(Action::Pause);
        assert_eq!(app.showing_incident(), Some("incident-x"));
        app.apply(Action::Incident);
        assert_eq!(app.showing_incident(), None);
        assert!(!app.paused);
        assert_eq!(app.profile.locks.len(), live.locks.len());
    }
}
