//! `/metrics`: per-lock counters and histograms in the Prometheus text
//! format (0.0.4, encoded by the `prometheus` crate), built from the
//! session's profiles.
//!
//! Counters are monotonic over the daemon's life: every profile's growth
//! since the previous one (the delta) is added to exactly one series, the
//! lock's own while it has one, else `lock="[other]"` of its type and mode.
//! So the increases of all series add up to every wait seen, even as locks
//! come and go. Cardinality is bounded: the `max_series` locks with the most
//! wait recently (an exponentially decayed sum) have series, the others
//! fold into `[other]`. A lock that falls out of the top loses its series (a
//! series that stops, as Prometheus expects of a vanished target); one that
//! enters it starts a new series at its first delta.

use std::collections::{BTreeMap, HashMap};

use profiler_common::{LockMode, LockType};
use prometheus::{
    Encoder as _, TextEncoder,
    proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType},
};

use crate::{
    incident::IncidentLog,
    model::{self, LockKey, LockProfile, Meta, NameSource, Profile, mode_name, type_name},
    pipeline::delta::{Deltas, LockDelta},
};

/// Label of the series that holds every lock without one of its own.
pub const OTHER: &str = "[other]";

pub use crate::pipeline::delta::{BUCKET_LOG2_NS, Hist, Totals};

mod cgroups;

use cgroups::CgroupSeries;

/// How much of a lock's recent-wait score survives each profile (about a
/// 30-profile half-life: a lock idle for a minute is overtaken quickly).
const DECAY: f64 = 0.977;
/// An incumbent keeps its series unless a newcomer's score beats it by this factor.
const HYSTERESIS: f64 = 1.25;

/// One lock's series: labels fixed when it started, counters since.
#[derive(Clone, Debug)]
struct Series {
    lock: String,
    class: String,
    slab: String,
    field: String,
    name_source: &'static str,
    counters: Totals,
}

/// The exporter's state: deltas folded into series, and the last profile's facts.
#[derive(Debug)]
pub struct Exporter {
    max_series: usize,
    /// What each profile added per lock.
    deltas: Deltas,
    /// Each lock's recent wait (decayed), the series' ranking.
    scores: HashMap<LockKey, f64>,
    series: HashMap<LockKey, Series>,
    other: BTreeMap<(LockType, LockMode), Totals>,
    meta: Meta,
    yields: Option<crate::model::YieldStats>,
    /// Counters of the server itself, shown with the session's drops.
    own_drops: BTreeMap<&'static str, model::Counter>,
    /// Rows held per table (what bounds the daemon's memory).
    rows: BTreeMap<&'static str, u64>,
    /// Each lock's waits split by the waiters' cgroup.
    cgroups: CgroupSeries,
    /// The incident triggers' counts (None: no triggers).
    incidents: Option<std::sync::Arc<IncidentLog>>,
}

fn name_source(l: &LockProfile) -> &'static str {
    match l.name_source {
        Some(NameSource::Kallsyms) => "kallsyms",
        Some(NameSource::Inferred) => "inferred",
        Some(NameSource::Btf) => "btf",
        Some(NameSource::Symbol) => "symbol",
        None => "class",
    }
}

impl Exporter {
    /// An exporter giving at most `max_series` locks and `max_cgroups`
    /// cgroups series of their own.
    pub fn new(max_series: usize, max_cgroups: usize) -> Exporter {
        Exporter {
            cgroups: CgroupSeries::new(max_cgroups),
            max_series,
            deltas: Deltas::new(),
            scores: HashMap::new(),
            series: HashMap::new(),
            other: BTreeMap::new(),
            meta: Meta::default(),
            yields: None,
            own_drops: BTreeMap::new(),
            rows: BTreeMap::new(),
            incidents: None,
        }
    }

    /// Sets the incident triggers' counts.
    pub fn set_incidents(&mut self, log: std::sync::Arc<IncidentLog>) {
        self.incidents = Some(log);
    }

    /// Sets the row count of one of the daemon's tables.
    pub fn set_rows(&mut self, table: &'static str, n: usize) {
        self.rows.insert(table, n as u64);
    }

    /// Sets a counter of the server's own for `lockprof_dropped_events_total`.
    pub fn set_drop(&mut self, c: model::Counter) {
        self.own_drops.insert(c.name, c);
    }

    /// Locks with series of their own now.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// Folds a new profile in.
    pub fn update(&mut self, p: &Profile) {
        let deltas = self.deltas.next(p);
        let mut scores = HashMap::with_capacity(deltas.len());
        for d in &deltas {
            let before = self.scores.get(&d.key).copied().unwrap_or(0.0);
            scores.insert(d.key, before * DECAY + d.totals.wait.sum_ns as f64);
        }
        // Locks no longer in the profile (aged out) lose their series.
        self.series.retain(|id, _| scores.contains_key(id));
        self.scores = scores;
        self.select(p, &deltas);
        for d in deltas.iter().filter(|d| !d.totals.is_zero()) {
            match self.series.get_mut(&d.key) {
                Some(s) => s.counters.add(&d.totals),
                None => self.other.entry((d.key.lock_type, d.key.mode)).or_default().add(&d.totals),
            }
        }
        let series = &self.series;
        self.cgroups.update(p, |k| series.get(k).map_or_else(|| OTHER.to_string(), |s| s.lock.clone()));
        self.meta = p.meta.clone();
        self.yields = p.yield_to.as_ref().map(|y| y.total.clone());
        self.set_rows("locks", p.locks.len());
        self.set_rows("callers", p.locks.iter().map(|l| l.callers.len()).sum());
        self.set_rows("tasks", p.tasks.len());
    }

    /// Gives the top locks by score series, keeping incumbents unless clearly beaten.
    fn select(&mut self, p: &Profile, locks: &[LockDelta]) {
        let score = |id: &LockKey| {
            let s = self.scores.get(id).copied().unwrap_or(0.0);
            if self.series.contains_key(id) { s * HYSTERESIS } else { s }
        };
        let mut ranked: Vec<(f64, LockKey, &LockProfile)> =
            locks.iter().filter(|d| d.key.addr != 0).map(|d| (score(&d.key), d.key, &p.locks[d.index])).collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let top: Vec<(LockKey, &LockProfile)> = ranked
            .into_iter()
            .filter(|(s, id, _)| *s > 0.0 || self.series.contains_key(id))
            .take(self.max_series)
            .map(|(_, id, l)| (id, l))
            .collect();
        let keep: std::collections::HashSet<LockKey> = top.iter().map(|(id, _)| *id).collect();
        self.series.retain(|id, _| keep.contains(id));
        for (id, l) in top {
            self.series.entry(id).or_insert_with(|| Series {
                lock: l.process_name(),
                class: l.class.clone(),
                slab: l.slab.clone().unwrap_or_default(),
                field: l.field.clone().unwrap_or_default(),
                name_source: name_source(l),
                counters: Totals::default(),
            });
        }
    }

    /// The exposition, Prometheus text format 0.0.4.
    pub fn encode(&self) -> Result<Vec<u8>, prometheus::Error> {
        let mut families = Vec::new();
        let holds = self.meta.hold_backend.is_some();
        type Pick = fn(&Totals) -> &Hist;
        let lock_families: [(&str, &str, Pick, Kind); 6] = [
            ("lockprof_lock_contentions_total", "Contended acquisitions (waits) per lock.", |t| &t.wait, Kind::Count),
            ("lockprof_lock_wait_seconds_total", "Time spent waiting for each lock.", |t| &t.wait, Kind::Sum),
            ("lockprof_lock_wait_seconds", "Distribution of waits per lock.", |t| &t.wait, Kind::Histogram),
            (
                "lockprof_lock_holds_total",
                "Contended acquisitions whose release was seen, per lock.",
                |t| &t.hold,
                Kind::Count,
            ),
            (
                "lockprof_lock_hold_seconds_total",
                "Time each lock was held after a contended acquisition.",
                |t| &t.hold,
                Kind::Sum,
            ),
            (
                "lockprof_lock_hold_seconds",
                "Distribution of hold times after contended acquisitions.",
                |t| &t.hold,
                Kind::Histogram,
            ),
        ];
        let mut rows: Vec<(Vec<(&str, String)>, &Totals)> = Vec::new();
        let mut ids: Vec<&LockKey> = self.series.keys().collect();
        ids.sort();
        for id in ids {
            let s = &self.series[id];
            rows.push((
                vec![
                    ("lock", s.lock.clone()),
                    ("type", type_name(id.lock_type).to_string()),
                    ("mode", mode_name(id.mode).to_string()),
                    ("addr", format!("{:#x}", id.addr)),
                    ("class", s.class.clone()),
                    ("name_source", s.name_source.to_string()),
                    ("slab", s.slab.clone()),
                    ("field", s.field.clone()),
                ],
                &s.counters,
            ));
        }
        for ((t, m), totals) in &self.other {
            rows.push((
                vec![
                    ("lock", OTHER.to_string()),
                    ("type", type_name(*t).to_string()),
                    ("mode", mode_name(*m).to_string()),
                    ("addr", String::new()),
                    ("class", String::new()),
                    ("name_source", String::new()),
                    ("slab", String::new()),
                    ("field", String::new()),
                ],
                totals,
            ));
        }
        for (i, (name, help, pick, kind)) in lock_families.into_iter().enumerate() {
            if i >= 3 && !holds {
                break;
            }
            let metrics = rows.iter().map(|(labels, t)| kind.metric(labels, pick(t))).collect();
            families.push(family(name, help, kind.metric_type(), metrics));
        }
        let cgroup_rows: Vec<(Vec<(&str, String)>, Hist)> = self
            .cgroups
            .series
            .iter()
            .map(|((cg, lock, t, m), s)| {
                let labels = vec![
                    ("cgroup", cg.clone()),
                    ("lock", lock.clone()),
                    ("type", type_name(*t).to_string()),
                    ("mode", mode_name(*m).to_string()),
                ];
                (labels, Hist { count: s.count, sum_ns: s.wait_ns, ..Hist::default() })
            })
            .collect();
        for (name, help, kind) in [
            (
                "lockprof_cgroup_lock_contentions_total",
                "Contended acquisitions per lock, by the waiting task's cgroup (at most --max-cgroups cgroups; \
                 the rest are cgroup=\"[other]\").",
                Kind::Count,
            ),
            (
                "lockprof_cgroup_lock_wait_seconds_total",
                "Time spent waiting for each lock, by the waiting task's cgroup.",
                Kind::Sum,
            ),
        ] {
            let metrics = cgroup_rows.iter().map(|(labels, h)| kind.metric(labels, h)).collect();
            families.push(family(name, help, kind.metric_type(), metrics));
        }
        if let Some(y) = &self.yields {
            let outcomes = [("yielded", y.yielded), ("failed", y.failed), ("error", y.errors)];
            let metrics = outcomes
                .iter()
                .map(|(o, n)| Kind::Count.metric(&[("outcome", o.to_string())], &count_only(*n)))
                .collect();
            families.push(family(
                "lockprof_yield_to_calls_total",
                "KVM directed yield (yield_to) calls by outcome.",
                MetricType::COUNTER,
                metrics,
            ));
            families.push(family(
                "lockprof_yield_to_latency_seconds",
                "Latency of yield_to calls.",
                MetricType::HISTOGRAM,
                vec![Kind::Histogram.metric(&[], &Hist::of(&y.latency))],
            ));
        }
        let drops = self
            .meta
            .drops
            .iter()
            .chain(self.own_drops.values().copied())
            .map(|c| {
                let labels = [("reason", c.name.to_string()), ("kind", c.kind.label().to_string())];
                Kind::Count.metric(&labels, &count_only(c.value))
            })
            .collect();
        families.push(family(
            "lockprof_dropped_events_total",
            "Events lost or folded, and rows aged out, by reason (every counter lockprof keeps); \
             kind=\"loss\" where data was lost, kind=\"bookkeeping\" where nothing was.",
            MetricType::COUNTER,
            drops,
        ));
        if let Some(log) = &self.incidents {
            let fired =
                log.fired.iter().map(|(t, n)| Kind::Count.metric(&[("trigger", t.clone())], &count_only(*n))).collect();
            families.push(family(
                "lockprof_incidents_total",
                "Incidents written, by trigger (--trigger).",
                MetricType::COUNTER,
                fired,
            ));
            let events = [
                ("rate_limited", log.rate_limited),
                ("merged", log.merged),
                ("deleted", log.deleted),
                ("write_failed", log.failed),
                ("long_waits_missed", log.missed_long_waits),
                ("ring_slots_dropped", log.ring_dropped),
            ]
            .iter()
            .map(|(e, n)| Kind::Count.metric(&[("event", e.to_string())], &count_only(*n)))
            .collect();
            families.push(family(
                "lockprof_incident_events_total",
                "What the incident limits did: fires beyond --max-incidents-per-hour (rate_limited), fires during \
                 a capture (merged into it), incidents deleted for --incident-dir-max-mb, incidents not written, \
                 long waits the triggers fell too far behind to judge, snapshots the ring dropped for its memory \
                 budget.",
                MetricType::COUNTER,
                events,
            ));
            families.push(family(
                "lockprof_incident_ring_bytes",
                "Estimated memory of the incident ring: the rows its snapshots hold that the session no longer does.",
                MetricType::GAUGE,
                vec![gauge(&[], log.ring_bytes as f64)],
            ));
        }
        families.push(family(
            "lockprof_events_total",
            "Contention events aggregated since start (the sum of every lock's contentions).",
            MetricType::COUNTER,
            vec![Kind::Count.metric(&[], &count_only(self.meta.events))],
        ));
        let m = &self.meta;
        let info = [
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("backend", m.backend.clone()),
            ("mode", m.mode.clone()),
            ("kernel", m.kernel.clone()),
            ("hold_backend", m.hold_backend.clone().unwrap_or_default()),
            ("yield_backend", m.yield_backend.clone().unwrap_or_default()),
        ];
        families.push(family(
            "lockprof_build_info",
            "lockprof's version and how it traces (always 1).",
            MetricType::GAUGE,
            vec![gauge(&info, 1.0)],
        ));
        families.push(family(
            "lockprof_lock_series",
            "Locks with series of their own (at most --max-series; the rest are lock=\"[other]\").",
            MetricType::GAUGE,
            vec![gauge(&[], self.series.len() as f64)],
        ));
        families.push(family(
            "lockprof_cgroup_series",
            "cgroups with series of their own (at most --max-cgroups; the rest are cgroup=\"[other]\").",
            MetricType::GAUGE,
            vec![gauge(&[], self.cgroups.named() as f64)],
        ));
        families.push(family(
            "lockprof_table_rows",
            "Rows held per table: locks, (lock, stack) callers and threads of the profile, pprof window rows.",
            MetricType::GAUGE,
            self.rows.iter().map(|(t, n)| gauge(&[("table", t.to_string())], *n as f64)).collect(),
        ));
        families.retain(|f| !f.get_metric().is_empty());
        let mut out = Vec::new();
        TextEncoder::new().encode(&families, &mut out)?;
        Ok(out)
    }
}

fn count_only(n: u64) -> Hist {
    Hist { count: n, ..Hist::default() }
}

/// Which face of a [`Hist`] a family shows.
#[derive(Clone, Copy)]
enum Kind {
    Count,
    Sum,
    Histogram,
}

impl Kind {
    fn metric_type(self) -> MetricType {
        match self {
            Kind::Count | Kind::Sum => MetricType::COUNTER,
            Kind::Histogram => MetricType::HISTOGRAM,
        }
    }

    fn metric(self, labels: &[(&str, String)], h: &Hist) -> Metric {
        let mut m = Metric::default();
        m.set_label(label_pairs(labels));
        match self {
            Kind::Count => m.set_counter(counter(h.count as f64)),
            Kind::Sum => m.set_counter(counter(h.sum_ns as f64 / 1e9)),
            Kind::Histogram => {
                let mut hist = Histogram::default();
                hist.set_sample_count(h.count);
                hist.set_sample_sum(h.sum_ns as f64 / 1e9);
                hist.set_bucket(
                    BUCKET_LOG2_NS
                        .iter()
                        .zip(h.below)
                        .map(|(k, n)| {
                            let mut b = Bucket::default();
                            b.set_upper_bound((1u64 << k) as f64 / 1e9);
                            b.set_cumulative_count(n);
                            b
                        })
                        .collect(),
                );
                m.set_histogram(hist);
            }
        }
        m
    }
}

fn label_pairs(labels: &[(&str, String)]) -> Vec<LabelPair> {
    labels
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name(k.to_string());
            l.set_value(v.clone());
            l
        })
        .collect()
}

fn counter(v: f64) -> Counter {
    let mut c = Counter::default();
    c.set_value(v);
    c
}

fn gauge(labels: &[(&str, String)], v: f64) -> Metric {
    let mut m = Metric::default();
    m.set_label(label_pairs(labels));
    let mut g = Gauge::default();
    g.set_value(v);
    m.set_gauge(g);
    m
}

fn family(name: &str, help: &str, t: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(t);
    f.set_metric(metrics);
    f
}

#[cfg(test)]
mod tests;
