//! The `--trigger` text: a filter and one condition, parsed strictly.
//!
//! ```text
//! TRIGGER   := TERM (',' TERM)*          one CONDITION, each FILTER at most once
//! FILTER    := lock=NAME | type=TYPE | cgroup=PATH | process=COMM-or-PID
//! CONDITION := wait>=DUR
//!            | pNN(LOCK?)>=DUR/WINDOW    p50, p90, p99, p99.9 ...: pNN>=1ms/5s or pNN()>=...: any lock
//!            | contentions(LOCK?)>=COUNT/s | contentions(LOCK?)>=COUNT/WINDOW
//! DUR       := number (decimals allowed) and a unit: ns, us, ms or s (10ms, 1.5ms, 250us)
//! WINDOW    := DUR in whole seconds, 1s to 3600s
//! COUNT     := number with an optional k, M or G (x1000, x1000000, x10^9): 500, 100k, 1.5M
//! ```
//!
//! Examples: `wait>=10ms`; `p99(tasklist_lock)>=1ms/5s`;
//! `contentions(rq_lock)>=100k/s`; `lock=mmap_lock,wait>=5ms`;
//! `type=futex,process=myapp,p99.9>=20ms/10s`.
//! Whitespace around terms and operators is allowed.
//!
//! - `wait>=DUR` fires on one wait at least that long (the kernel's outlier
//!   stream).
//! - `pNN>=DUR/WINDOW` fires when the NN-th percentile of a lock's waits over
//!   the last WINDOW is at least DUR.
//! - `contentions>=COUNT/WINDOW` fires when a lock (any lock, or the ones the
//!   filter keeps) was contended at least COUNT times over the last WINDOW:
//!   COUNT/WINDOW per second on average (`/s` is `/1s`; `500/5s` is 100 per
//!   second averaged over 5 s).
//!
//! A LOCK in the parentheses is the same as `lock=` (giving both is an
//! error): any name `--lock` takes (a name like `tasklist_lock`, a slab
//! `&task_struct`, a member `task_struct.pi_lock`, a class, or a hex address
//! `0x...`). `type=` takes the names `--type` takes. `process=` matches the
//! waiting task's process (its name or pid) for `wait>=`, and a user-space
//! lock's process for the others (kernel locks never match it). `cgroup=`
//! is the waiting task's cgroup; percentiles are per lock, so it works with
//! `wait>=` and `contentions` only.

use std::{fmt, str::FromStr, time::Duration};

use profiler_common::LockType;

use crate::{
    model::{LockProfile, parse_type, type_name},
    query::lock_matches,
};

#[cfg(test)]
mod tests;

/// One `--trigger`: which locks or tasks, and when it fires.
#[derive(Clone, Debug, PartialEq)]
pub struct Trigger {
    /// The text as given, trimmed.
    pub text: String,
    /// Which locks, tasks or cgroups count.
    pub filter: Filter,
    /// When it fires.
    pub condition: Condition,
}

/// The filter terms of a trigger (all None: everything counts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// `lock=NAME` or the LOCK in `pNN(LOCK)` / `contentions(LOCK)`: any
    /// form `--lock` takes.
    pub lock: Option<String>,
    /// `type=TYPE`.
    pub lock_type: Option<LockType>,
    /// `cgroup=PATH-or-NAME`: the waiting task's cgroup (not checked by
    /// [`Filter::lock_ok`]).
    pub cgroup: Option<String>,
    /// `process=COMM-or-PID`: the waiting task's process for `wait>=`, a
    /// user-space lock's process for the others.
    pub process: Option<String>,
}

/// When a trigger fires.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Condition {
    /// One wait at least this long (seen in the kernel: the outlier stream).
    Wait {
        /// The threshold, ns.
        min_ns: u64,
    },
    /// The q-quantile (0.99 for p99, 0.999 for p99.9, 0.5 for p50) of the waits over the last `over`, at least `min_ns`.
    Quantile {
        /// The quantile, in (0, 1).
        q: f64,
        /// The threshold, ns.
        min_ns: u64,
        /// The window, whole seconds.
        over: Duration,
    },
    /// Contentions per second, averaged over the last `over` (default 1 s), at least `min_per_s`.
    Rate {
        /// The threshold, contentions per second.
        min_per_s: f64,
        /// The window, whole seconds.
        over: Duration,
    },
}

/// A `--trigger` text that does not parse: one line saying what is wrong
/// and what is expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TriggerError(String);

/// The longest window a condition may average over.
const MAX_WINDOW_S: u64 = 3600;

const LOCK_TWICE: &str = "the lock is given twice: give it once, with lock= or in the condition's parentheses";

const KNOWN_TERMS: &str = "lock=, type=, cgroup=, process=, wait>=, pNN>= (p50, p99, p99.9...), contentions>=";

impl FromStr for Trigger {
    type Err = TriggerError;

    fn from_str(s: &str) -> Result<Trigger, TriggerError> {
        let text = s.trim();
        if text.is_empty() {
            return Err(TriggerError(
                "empty trigger: expected a condition such as wait>=10ms or p99(tasklist_lock)>=1ms/5s".into(),
            ));
        }
        let mut filter = Filter::default();
        let mut condition = None;
        for term in split_terms(text) {
            term_into(term.trim(), &mut filter, &mut condition).map_err(TriggerError)?;
        }
        let Some((condition, _)) = condition else {
            return Err(TriggerError(format!(
                "{text:?} has no condition: add one of wait>=DUR, pNN>=DUR/WINDOW or contentions>=COUNT/s"
            )));
        };
        if matches!(condition, Condition::Quantile { .. }) && filter.cgroup.is_some() {
            return Err(TriggerError(
                "percentiles are per lock; a cgroup filter works with wait>= and contentions".into(),
            ));
        }
        Ok(Trigger { text: text.to_string(), filter, condition })
    }
}

/// The terms of a trigger: split at commas outside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

/// Parses one term into the filter or the condition.
fn term_into(term: &str, filter: &mut Filter, condition: &mut Option<(Condition, String)>) -> Result<(), String> {
    if term.is_empty() {
        return Err("empty term: two commas in a row, or a comma at an end".into());
    }
    let key_end = term.find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_')).unwrap_or(term.len());
    let (key, rest) = (&term[..key_end], term[key_end..].trim_start());
    let slot = match key {
        "lock" => Some(&mut filter.lock),
        "cgroup" => Some(&mut filter.cgroup),
        "process" => Some(&mut filter.process),
        "type" => None,
        "wait" | "contentions" => return condition_into(key, None, rest, filter, condition),
        _ => match percentile(key) {
            Some(q) => return condition_into(key, Some(q?), rest, filter, condition),
            None => return Err(format!("unknown term {term:?}: known terms are {KNOWN_TERMS}")),
        },
    };
    let value = operand(key, rest, "=", "NAME")?;
    if value.is_empty() {
        return Err(format!("{key}= needs a value"));
    }
    match slot {
        Some(slot) if slot.is_some() && key == "lock" => Err(LOCK_TWICE.into()),
        Some(slot) if slot.is_some() => Err(format!("{key}= is given twice")),
        Some(slot) => {
            *slot = Some(value.to_string());
            Ok(())
        }
        None if filter.lock_type.is_some() => Err("type= is given twice".into()),
        None => {
            let t = parse_type(value).ok_or_else(|| {
                let known = LockType::ALL.iter().map(|t| type_name(*t)).collect::<Vec<_>>().join(", ");
                format!("type={value:?}: unknown lock type; known types: {known}")
            })?;
            filter.lock_type = Some(t);
            Ok(())
        }
    }
}

/// `p50`, `p99.9`: the quantile (None: not a `pNN` key).
fn percentile(key: &str) -> Option<Result<f64, String>> {
    let nn = key.strip_prefix('p')?;
    if nn.is_empty() || !nn.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let bad = || format!("{key}: a percentile is above 0 and below 100, such as p50, p90, p99 or p99.9");
    let (int, frac) = nn.split_once('.').unwrap_or((nn, ""));
    if int.is_empty() || int.len() > 2 || frac.contains('.') || (nn.contains('.') && frac.is_empty()) {
        return Some(Err(bad()));
    }
    // The decimal point moved two places: exactly the f64 nearest 0.999, not 99.9 / 100.
    let q = format!("0.{int:0>2}{frac}").parse::<f64>().map_err(|_| bad());
    Some(q.and_then(|q| if q > 0.0 { Ok(q) } else { Err(bad()) }))
}

/// What follows `op` in a term's `rest`, trimmed; an error naming the
/// operator expected when another one is there.
fn operand<'a>(key: &str, rest: &'a str, op: &str, example: &str) -> Result<&'a str, String> {
    let given_end = rest.find(|c: char| !matches!(c, '<' | '>' | '=' | '!')).unwrap_or(rest.len());
    let given = &rest[..given_end];
    if given == op {
        return Ok(rest[given_end..].trim());
    }
    let why = if op == ">=" { " (a trigger fires at or above a threshold)" } else { "" };
    if given.is_empty() {
        Err(format!("expected {op} after {key}, as in {key}{op}{example}{why}"))
    } else {
        Err(format!("operator {given:?} after {key}: expected {op}, as in {key}{op}{example}{why}"))
    }
}

/// Parses `(LOCK?)>=VALUE` after a condition's key.
fn condition_into(
    key: &str,
    q: Option<f64>,
    rest: &str,
    filter: &mut Filter,
    condition: &mut Option<(Condition, String)>,
) -> Result<(), String> {
    if let Some((_, first)) = condition {
        return Err(format!(
            "a trigger has one condition and {first} is already given before {key} (--trigger is repeatable)"
        ));
    }
    let mut rest = rest;
    if let Some(inner) = rest.strip_prefix('(') {
        if key == "wait" {
            return Err(
                "wait takes no lock in parentheses: add a lock=NAME term, as in lock=mmap_lock,wait>=5ms".into()
            );
        }
        let (lock, after) = inner.split_once(')').ok_or_else(|| format!("{key}(: missing the closing parenthesis"))?;
        let lock = lock.trim();
        if !lock.is_empty() {
            if filter.lock.is_some() {
                return Err(LOCK_TWICE.into());
            }
            filter.lock = Some(lock.to_string());
        }
        rest = after.trim_start();
    }
    let c = match (key, q) {
        ("wait", _) => Condition::Wait { min_ns: duration_ns(operand(key, rest, ">=", "10ms")?, "the wait")? },
        ("contentions", _) => {
            let value = operand(key, rest, ">=", "100k/s")?;
            let (count, window) = value.split_once('/').ok_or_else(|| {
                format!("{key}>={value:?}: needs a rate, COUNT/s or COUNT/WINDOW, such as 100k/s or 500k/5s")
            })?;
            let over = match window.trim() {
                "s" => Duration::from_secs(1),
                w => window_of(w)?,
            };
            Condition::Rate { min_per_s: count_of(count)? / over.as_secs_f64(), over }
        }
        (_, Some(q)) => {
            let value = operand(key, rest, ">=", "1ms/5s")?;
            let (dur, window) = value.split_once('/').ok_or_else(|| {
                format!(
                    "{key}>={value:?}: needs a window, DUR/WINDOW, such as {key}>=1ms/5s (the waits of the last 5 s)"
                )
            })?;
            Condition::Quantile { q, min_ns: duration_ns(dur, "the percentile")?, over: window_of(window)? }
        }
        _ => return Err(format!("unknown condition {key:?}")),
    };
    *condition = Some((c, key.to_string()));
    Ok(())
}

/// A number and what follows it (trimmed).
fn number_unit(s: &str) -> (&str, &str) {
    let s = s.trim();
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    (&s[..end], s[end..].trim())
}

/// `10ms`, `1.5ms`, `250us`: nanoseconds, more than zero.
fn duration_ns(s: &str, what: &str) -> Result<u64, String> {
    let (num, unit) = number_unit(s);
    let s = s.trim();
    let scale_digits = match unit {
        "ns" => 0,
        "us" => 3,
        "ms" => 6,
        "s" => 9,
        "" if num.is_empty() => return Err(format!("{what} is missing: expected a duration such as 10ms")),
        "" => return Err(format!("{what} {s:?} needs a unit: ns, us, ms or s")),
        _ if num.is_empty() => {
            return Err(format!("{what} {s:?} is not a duration: expected a number and a unit, such as 10ms"));
        }
        _ => return Err(format!("{what} {s:?} has an unknown unit {unit:?}: expected ns, us, ms or s")),
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(format!("{what} {s:?} is not a number and a unit, such as 10ms or 1.5ms"));
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale_digits {
        return Err(format!("{what} {s:?} is finer than a nanosecond"));
    }
    let too_big = || format!("{what} {s:?} is too long");
    let digits = format!("{int}{frac:0<scale_digits$}");
    let ns = digits.trim_start_matches('0');
    let ns = if ns.is_empty() { 0 } else { ns.parse::<u64>().map_err(|_| too_big())? };
    if ns == 0 {
        return Err(format!("{what} {s:?} must be more than zero"));
    }
    Ok(ns)
}

/// `5s`: a whole number of seconds, 1 to 3600.
fn window_of(s: &str) -> Result<Duration, String> {
    let ns = duration_ns(s, "the window")?;
    if ns % 1_000_000_000 != 0 || !(1..=MAX_WINDOW_S).contains(&(ns / 1_000_000_000)) {
        return Err(format!("the window {:?} must be whole seconds from 1s to {MAX_WINDOW_S}s", s.trim()));
    }
    Ok(Duration::from_secs(ns / 1_000_000_000))
}

/// `500`, `100k`, `1.5M`: a positive count.
fn count_of(s: &str) -> Result<f64, String> {
    let (num, suffix) = number_unit(s);
    let s = s.trim();
    if num.is_empty() {
        return Err(format!("the count {s:?} is not a number, such as 500, 100k or 1.5M"));
    }
    let exp = match suffix {
        "" => 0,
        "k" => 3,
        "M" => 6,
        "G" => 9,
        _ => return Err(format!("the count {s:?} has an unknown suffix {suffix:?}: expected k, M or G")),
    };
    // Parsed with its exponent, so 1.1k is exactly the f64 nearest 1100.
    match format!("{num}e{exp}").parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err(format!("the count {s:?} must be more than zero")),
        Err(_) => Err(format!("the count {s:?} is not a number, such as 500, 100k or 1.5M")),
    }
}

/// Canonical text of a duration: the largest unit that keeps it whole.
fn fmt_ns(ns: u64) -> String {
    match ns {
        0 => "0ns".into(),
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

/// `99.9` for 0.999: the quantile's decimal point moved two places.
fn fmt_percentile(q: f64) -> String {
    let s = q.to_string();
    let Some(frac) = s.strip_prefix("0.") else {
        return (q * 100.0).to_string();
    };
    let (int, rest) = frac.split_at(frac.len().min(2));
    let int = format!("{int:0<2}");
    let int = match int.trim_start_matches('0') {
        "" => "0",
        i => i,
    };
    if rest.is_empty() { int.to_string() } else { format!("{int}.{rest}") }
}

/// The shortest count that parses back to `min_per_s` over `over`, with a
/// k, M or G when it is a whole number of those.
fn fmt_count(min_per_s: f64, over: Duration) -> String {
    let secs = over.as_secs_f64();
    let total = min_per_s * secs;
    let count = (0..=17)
        .filter_map(|p| format!("{total:.p$}").parse::<f64>().ok())
        .find(|c| *c / secs == min_per_s)
        .unwrap_or(total);
    for (unit, suffix) in [(1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if count >= unit && (count / unit).fract() == 0.0 && count / unit * unit == count {
            return format!("{}{suffix}", count / unit);
        }
    }
    count.to_string()
}

/// The window after a `/`: `s` for one second.
fn fmt_window(over: Duration, one: &str) -> String {
    if over == Duration::from_secs(1) { one.to_string() } else { fmt_ns(over.as_nanos() as u64) }
}

impl fmt::Display for Trigger {
    /// The canonical text: filters (lock=, type=, cgroup=, process=), then
    /// the condition, with the lock in its parentheses when it takes one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fl = &self.filter;
        let in_parens = !matches!(self.condition, Condition::Wait { .. });
        let mut terms = Vec::new();
        if let Some(l) = fl.lock.as_ref().filter(|_| !in_parens) {
            terms.push(format!("lock={l}"));
        }
        if let Some(t) = fl.lock_type {
            terms.push(format!("type={}", type_name(t)));
        }
        if let Some(c) = &fl.cgroup {
            terms.push(format!("cgroup={c}"));
        }
        if let Some(p) = &fl.process {
            terms.push(format!("process={p}"));
        }
        let lock = fl.lock.as_ref().map(|l| format!("({l})")).unwrap_or_default();
        terms.push(match self.condition {
            Condition::Wait { min_ns } => format!("wait>={}", fmt_ns(min_ns)),
            Condition::Quantile { q, min_ns, over } => {
                format!("p{}{lock}>={}/{}", fmt_percentile(q), fmt_ns(min_ns), fmt_ns(over.as_nanos() as u64))
            }
            Condition::Rate { min_per_s, over } => {
                format!("contentions{lock}>={}/{}", fmt_count(min_per_s, over), fmt_window(over, "s"))
            }
        });
        f.write_str(&terms.join(","))
    }
}

/// The longest slug.
const SLUG_MAX: usize = 64;

/// A value in a slug: only `[A-Za-z0-9._-]` (other runs become one `_`), at most 32 characters.
fn slug_part(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.truncate(32);
    out
}

impl Trigger {
    /// A short, filename-safe name: `wait-ge-10ms`, `p99-tasklist_lock-ge-1ms-5s`,
    /// `contentions-rq_lock-ge-100k-per-s`, `lock-mmap_lock-wait-ge-5ms`
    /// (only `[A-Za-z0-9._-]`, at most 64 characters).
    pub fn slug(&self) -> String {
        let fl = &self.filter;
        let in_parens = !matches!(self.condition, Condition::Wait { .. });
        let mut filters = Vec::new();
        if let Some(l) = fl.lock.as_ref().filter(|_| !in_parens) {
            filters.extend(["lock".to_string(), slug_part(l)]);
        }
        if let Some(t) = fl.lock_type {
            filters.extend(["type".to_string(), slug_part(type_name(t))]);
        }
        if let Some(c) = &fl.cgroup {
            filters.extend(["cgroup".to_string(), slug_part(c)]);
        }
        if let Some(p) = &fl.process {
            filters.extend(["process".to_string(), slug_part(p)]);
        }
        let lock = fl.lock.as_deref().filter(|_| in_parens).map(slug_part);
        let mut condition = Vec::new();
        match self.condition {
            Condition::Wait { min_ns } => condition.extend(["wait".to_string(), "ge".into(), fmt_ns(min_ns)]),
            Condition::Quantile { q, min_ns, over } => {
                condition.push(format!("p{}", fmt_percentile(q)));
                condition.extend(lock);
                condition.extend(["ge".to_string(), fmt_ns(min_ns), fmt_ns(over.as_nanos() as u64)]);
            }
            Condition::Rate { min_per_s, over } => {
                condition.push("contentions".into());
                condition.extend(lock);
                condition.extend(["ge".to_string(), slug_part(&fmt_count(min_per_s, over)), "per".into()]);
                condition.push(fmt_window(over, "s"));
            }
        }
        // The condition whole when it fits; the filters cut to what is left.
        let mut condition = condition.join("-");
        condition.truncate(SLUG_MAX);
        let mut slug = filters.join("-");
        slug.truncate(SLUG_MAX.saturating_sub(condition.len() + 1));
        let slug = slug.trim_end_matches(['-', '_', '.']);
        let slug = if slug.is_empty() { condition } else { format!("{slug}-{condition}") };
        slug.trim_end_matches(['-', '_', '.']).to_string()
    }

    /// How much per-second history evaluating it needs: 1 s for `wait>=`,
    /// the window for the others.
    pub fn history(&self) -> Duration {
        match self.condition {
            Condition::Wait { .. } => Duration::from_secs(1),
            Condition::Quantile { over, .. } | Condition::Rate { over, .. } => over,
        }
    }
}

/// The smallest `wait>=` threshold of `triggers` (what the kernel must stream).
pub fn min_wait_ns(triggers: &[Trigger]) -> Option<u64> {
    triggers
        .iter()
        .filter_map(|t| match t.condition {
            Condition::Wait { min_ns } => Some(min_ns),
            _ => None,
        })
        .min()
}

impl Filter {
    /// Whether lock `l` passes the lock, type and process terms (the cgroup
    /// term is not checked here). A process term keeps only user-space
    /// locks of that process (its name or pid): kernel locks belong to none.
    pub fn lock_ok(&self, l: &LockProfile) -> bool {
        self.lock.as_deref().is_none_or(|f| lock_matches(l, f))
            && self.lock_type.is_none_or(|t| t == l.lock_type)
            && (self.process.is_none() || l.pid.is_some_and(|pid| self.process_ok(pid, l.process.as_deref())))
    }

    /// Whether a process (pid and name, when known) passes the process
    /// term: the waiting task's for `wait>=`, a user-space lock's otherwise.
    pub fn process_ok(&self, pid: u32, comm: Option<&str>) -> bool {
        self.process.as_deref().is_none_or(|p| {
            let p = p.trim();
            p.parse::<u32>().is_ok_and(|n| n == pid) || comm.is_some_and(|c| c == p)
        })
    }

    /// No filter term at all.
    pub fn is_empty(&self) -> bool {
        self.lock.is_none() && self.lock_type.is_none() && self.cgroup.is_none() && self.process.is_none()
    }
}
