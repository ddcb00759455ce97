//! The incident engine: fed every snapshot of the session, it keeps a ring
//! of the recent ones, judges the triggers, and when one fires writes the
//! profile of the window around it (`--before` to `--after`) as a
//! recording.
//!
//! Memory: the ring holds the aggregator's snapshots themselves, whose rows
//! are shared `Arc`s copied on write, so a slot costs only the rows that
//! changed in its second. A window's profile is the difference of two
//! snapshots ([`Snapshot::since`]), built by the session's profile builder.
//!
//! Single long waits come from the kernel's outlier stream (every wait of
//! at least `--outlier-us`, lowered to the smallest `wait>=` threshold,
//! through `Snapshot::recent`), each judged once; they are also a window's
//! slowest waits. Rates and percentiles are judged on the window of the
//! last `over` seconds, every snapshot.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use profiler_common::ContentionEvent;
use tokio::sync::watch;

use super::{
    options::IncidentOptions,
    ring::{self, Ring, Slot},
    store::{Store, StoreError},
    system::{self, CpuSample},
    trigger::{Trigger, min_wait_ns},
};
use crate::{
    model::{IncidentInfo, Profile, SystemState},
    pipeline::Snapshot,
};

/// A fired trigger whose window is still open.
struct Pending {
    trigger: usize,
    reason: String,
    fired: Slot,
    base: Slot,
    system: SystemState,
    cpu: CpuSample,
    due: Instant,
}

/// An incident written by this session.
#[derive(Clone, Debug)]
pub struct Written {
    /// Its id.
    pub id: String,
    /// Its file.
    pub path: PathBuf,
    /// The trigger's text.
    pub trigger: String,
    /// What fired it.
    pub reason: String,
    /// When (Unix ms).
    pub fired_unix_ms: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// What the engine publishes after each change: the incidents written and
/// its counters.
#[derive(Clone, Debug, Default)]
pub struct IncidentLog {
    /// The directory incidents go to.
    pub dir: PathBuf,
    /// Incidents written by this session, oldest first.
    pub written: Vec<Written>,
    /// The latest incident's profile (what `top` opens).
    pub last: Option<Arc<Profile>>,
    /// Per trigger (in the order given): its text and the incidents it wrote.
    pub fired: Vec<(String, u64)>,
    /// Whether a window is being captured now (a trigger fired, its
    /// `--after` seconds not over).
    pub capturing: bool,
    /// Triggers that fired beyond `--max-incidents-per-hour`.
    pub rate_limited: u64,
    /// Triggers that fired while a window was being captured (they are in it).
    pub merged: u64,
    /// Incidents deleted for `--incident-dir-max-mb`.
    pub deleted: u64,
    /// Incidents that could not be written.
    pub failed: u64,
    /// Long waits the engine fell too far behind to judge.
    pub missed_long_waits: u64,
    /// Snapshots the ring holds.
    pub ring_slots: usize,
    /// Estimated bytes the ring holds beyond the aggregator's rows.
    pub ring_bytes: usize,
    /// Ring slots dropped for its memory budget (windows then start later).
    pub ring_dropped: u64,
}

/// Builds the profile of a window snapshot (the session's builder).
pub trait WindowBuilder {
    /// The profile of `snap`, a [`Snapshot::since`] window.
    fn window(&mut self, snap: &Snapshot) -> Profile;
}

/// How the engine spaces its ring: every snapshot of the last `dense`
/// (what the triggers read), one every `step` back to `keep`.
pub fn ring_shape(opts: &IncidentOptions) -> (Duration, Duration, Duration) {
    let history = opts.triggers.iter().map(Trigger::history).max().unwrap_or_default();
    let dense = history.max(HOLD_FOR) + Duration::from_secs(3);
    let step = (opts.before / 8).max(Duration::from_secs(1));
    let keep = (opts.before + step).max(dense) + Duration::from_secs(2);
    (keep, dense, step)
}

/// See the module documentation.
pub struct Engine {
    triggers: Vec<Trigger>,
    before: Duration,
    after: Duration,
    keep: Duration,
    dense: Duration,
    step: Duration,
    store: Store,
    start: Slot,
    ring: Ring,
    seen_seq: u64,
    /// Long waits not judged yet: their lock's figures (drained from the
    /// kernel's maps each interval) may come an interval after the wait.
    held: Vec<(ContentionEvent, Instant)>,
    pending: Option<Pending>,
    log: IncidentLog,
    publish: watch::Sender<Arc<IncidentLog>>,
}

/// How long a long wait may wait for its lock's figures before it is
/// judged without them.
const HOLD_FOR: Duration = Duration::from_secs(3);
/// A window is captured at the first snapshot at most this much before its
/// end (snapshots come once per interval, give or take the scheduler).
const DUE_SLACK: Duration = Duration::from_millis(250);
/// Long waits held at most (more: the oldest are counted as missed).
const HELD_MAX: usize = 256;

impl Engine {
    /// An engine for `opts` writing into `store`, from a session that
    /// starts now; its log is published on the returned channel.
    pub fn new(opts: &IncidentOptions, store: Store) -> (Engine, watch::Receiver<Arc<IncidentLog>>) {
        let log = IncidentLog {
            dir: store.dir().to_path_buf(),
            fired: opts.triggers.iter().map(|t| (t.to_string(), 0)).collect(),
            ..IncidentLog::default()
        };
        let (publish, rx) = watch::channel(Arc::new(log.clone()));
        // Every second of what the triggers read; one every `step` back to
        // `--before` (and one more step: a window starts at or before it).
        let (keep, dense, step) = ring_shape(opts);
        let engine = Engine {
            triggers: opts.triggers.clone(),
            before: opts.before,
            after: opts.after,
            keep,
            dense,
            step,
            store,
            start: Slot::now(Arc::new(Snapshot::default())),
            ring: Ring::new(ring::BUDGET_BYTES),
            seen_seq: 0,
            held: Vec::new(),
            pending: None,
            log,
            publish,
        };
        (engine, rx)
    }

    /// Judges a new snapshot: captures a window that is due, fires
    /// triggers, and keeps the snapshot for later windows.
    pub fn observe(&mut self, snap: Arc<Snapshot>, builder: &mut dyn WindowBuilder) {
        let now = Slot::now(snap);
        self.observe_at(now, builder);
    }

    fn observe_at(&mut self, now: Slot, builder: &mut dyn WindowBuilder) {
        let mut changed = false;
        if self.pending.as_ref().is_some_and(|p| now.at + DUE_SLACK >= p.due) {
            self.capture(&now, builder);
            changed = true;
        }
        let long = self.new_long_waits(&now.snap);
        let min_wait = min_wait_ns(&self.triggers).unwrap_or(u64::MAX);
        self.held.extend(long.into_iter().filter(|e| e.wait_ns >= min_wait).map(|e| (e, now.at)));
        if self.held.len() > HELD_MAX {
            self.log.missed_long_waits += (self.held.len() - HELD_MAX) as u64;
            self.held.drain(..self.held.len() - HELD_MAX);
        }
        if let Some((trigger, reason, ended_ns)) = self.judge(&now, builder) {
            changed = true;
            if self.pending.is_some() {
                self.log.merged += 1;
            } else if !self.store.admit(now.at) {
                self.log.rate_limited += 1;
                // A condition that lasts fires every interval: said at 1, 2, 4, 8... fires.
                if self.log.rate_limited.is_power_of_two() {
                    log::warn!(
                        "incident trigger `{}` fired ({reason}) beyond --max-incidents-per-hour ({} such fires)",
                        self.triggers[trigger],
                        self.log.rate_limited
                    );
                }
            } else {
                // A long wait fired when it ended, not when it was judged.
                let ago = Duration::from_nanos(ended_ns.map_or(0, |e| now.mono_ns.saturating_sub(e)));
                let fired = Slot {
                    at: now.at.checked_sub(ago).unwrap_or(now.at),
                    mono_ns: now.mono_ns.saturating_sub(ago.as_nanos() as u64),
                    unix_ms: now.unix_ms.saturating_sub(ago.as_millis() as u64),
                    snap: now.snap.clone(),
                };
                let base = self.base_at(fired.at.checked_sub(self.before));
                log::info!("incident trigger `{}` fired: {reason}", self.triggers[trigger]);
                let due = fired.at + self.after;
                self.pending = Some(Pending {
                    trigger,
                    reason,
                    fired,
                    base,
                    system: system::state_now(),
                    cpu: CpuSample::take(),
                    due,
                });
                if now.at + DUE_SLACK >= due {
                    self.capture(&now, builder);
                }
            }
        }
        self.ring.push(now, self.keep, self.dense, self.step);
        let ring = (self.ring.len(), self.ring.bytes(), self.ring.dropped);
        if changed
            || self.log.capturing != self.pending.is_some()
            || (self.log.ring_slots, self.log.ring_bytes, self.log.ring_dropped) != ring
        {
            (self.log.ring_slots, self.log.ring_bytes, self.log.ring_dropped) = ring;
            self.log.capturing = self.pending.is_some();
            self.log.deleted = self.store.deleted;
            self.publish.send_replace(Arc::new(self.log.clone()));
        }
    }

    /// Ends the session: a window still open is captured with what there is.
    pub fn finish(&mut self, builder: &mut dyn WindowBuilder) {
        if self.pending.is_some() {
            let last = self.ring.back().cloned().unwrap_or_else(|| self.start.clone());
            let last = Slot { at: Instant::now(), ..last };
            self.capture(&last, builder);
            self.log.capturing = false;
            self.log.deleted = self.store.deleted;
            self.publish.send_replace(Arc::new(self.log.clone()));
        }
    }

    /// The long waits of `snap` not judged yet (counting those missed).
    fn new_long_waits(&mut self, snap: &Snapshot) -> Vec<ContentionEvent> {
        let fresh = snap.recent_seq.saturating_sub(self.seen_seq);
        self.seen_seq = snap.recent_seq;
        let kept = snap.recent.len() as u64;
        self.log.missed_long_waits += fresh.saturating_sub(kept);
        snap.recent.iter().skip((kept - fresh.min(kept)) as usize).copied().collect()
    }

    /// The latest snapshot taken at or before `t`; the session's start when
    /// `t` is before it (or `None`: the machine's uptime is shorter than
    /// `--before`), else the oldest kept.
    fn base_at(&self, t: Option<Instant>) -> Slot {
        let Some(t) = t.filter(|&t| t > self.start.at) else { return self.start.clone() };
        self.ring.at_or_before(t).cloned().unwrap_or_else(|| self.start.clone())
    }

    /// Writes the window of the pending incident, ending at `end`.
    fn capture(&mut self, end: &Slot, builder: &mut dyn WindowBuilder) {
        let Some(p) = self.pending.take() else { return };
        let long: Vec<ContentionEvent> = end.snap.recent.iter().copied().collect();
        let window = end.snap.since(&p.base.snap, p.base.mono_ns, &long);
        let mut profile = builder.window(&window);
        profile.meta.duration_s = end.at.saturating_duration_since(p.base.at).as_secs_f64();
        profile.meta.started_unix_s = p.base.unix_ms / 1000;
        if profile.meta.yield_backend.take().is_some() {
            profile.meta.yield_unavailable = Some("not kept in incident windows".into());
        }
        profile.yield_to = None;
        let mut system = p.system;
        system.top_tasks = p.cpu.busiest(&CpuSample::take(), system::TOP_TASKS);
        let trigger = &self.triggers[p.trigger];
        let id = self.unique_id(&format!("incident-{}-{}", crate::clock::utc_stamp(p.fired.unix_ms), trigger.slug()));
        profile.incident = Some(IncidentInfo {
            id: id.clone(),
            trigger: trigger.to_string(),
            reason: p.reason.clone(),
            fired_unix_ms: p.fired.unix_ms,
            window_start_unix_ms: p.base.unix_ms,
            window_end_unix_ms: end.unix_ms,
            system: Some(system),
        });
        match self.store.write(&id, &profile, end.at) {
            Ok(path) => {
                let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
                log::info!("incident written to {}", path.display());
                self.log.written.push(Written {
                    id,
                    path,
                    trigger: trigger.to_string(),
                    reason: p.reason,
                    fired_unix_ms: p.fired.unix_ms,
                    bytes,
                });
                if let Some(f) = self.log.fired.get_mut(p.trigger) {
                    f.1 += 1;
                }
                self.log.last = Some(Arc::new(profile));
            }
            Err(e @ StoreError::Write(_)) | Err(e @ StoreError::Dir(..)) => {
                self.log.failed += 1;
                log::warn!("{e}");
            }
        }
    }

    /// `id`, or `id-2`, `id-3`... when taken.
    fn unique_id(&self, id: &str) -> String {
        (1..)
            .map(|n| if n == 1 { id.to_string() } else { format!("{id}-{n}") })
            .find(|c| self.store.path_of(c).is_none())
            .unwrap_or_else(|| id.to_string())
    }
}

mod judge;
#[cfg(test)]
mod tests;
