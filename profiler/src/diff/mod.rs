//! Before and after a change: recordings of two setups (each a set of
//! rounds) compared lock by lock, or caller by caller.
//!
//! `side` matches rows across recordings (by name, type and mode; callers
//! by function; `classes` names the unnamed locks alike), `row` is what is said of one row, `compare` computes
//! before -> after, the changes and, over
//! rounds, Welch's t-test (`welch`, on `beta`'s special functions) with a
//! Holm correction and a verdict; `summary` says what each side is and what
//! the reader must know; `text`, `json` render the comparison (text and
//! Markdown; JSON and CSV); `spread` is one side's round-to-round spread
//! (`record --rounds N`). Pure functions of profiles: no I/O.

mod beta;
mod classes;
mod compare;
mod format;
mod json;
mod row;
mod side;
mod spread;
mod summary;
#[cfg(test)]
mod tests;
mod text;
mod welch;

pub use compare::{Diff, DiffOptions, compare, defaults};
pub use row::{Changes, DiffRow, Status, TestMetric, Values, Verdict};
pub use side::{DiffBy, RowKey, Side, SideOptions, caller_key_name, lock_key_name, sides};
pub use spread::{Rounds, Spread};
pub use summary::SideSummary;
pub use welch::{Welch, holm, student_t_two_sided, welch};

/// Output format of a comparison.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum DiffFormat {
    /// A terminal table.
    #[default]
    Text,
    /// The `lockprof-diff/1` JSON document.
    Json,
    /// One row per lock or caller, header first.
    Csv,
    /// A Markdown table to paste into a mail.
    Markdown,
}

impl DiffFormat {
    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            DiffFormat::Text => "text",
            DiffFormat::Json => "json",
            DiffFormat::Csv => "csv",
            DiffFormat::Markdown => "markdown",
        }
    }
}

/// Renders a comparison.
pub fn render(d: &Diff, format: DiffFormat, separator: char) -> String {
    match format {
        DiffFormat::Text => text::render_text(d),
        DiffFormat::Json => json::render_json(d),
        DiffFormat::Csv => json::render_csv(d, separator),
        DiffFormat::Markdown => text::render_markdown(d),
    }
}

/// Renders the spread of a set of rounds (Markdown reads as text).
pub fn render_rounds(r: &Rounds, format: DiffFormat, separator: char) -> String {
    match format {
        DiffFormat::Text | DiffFormat::Markdown => spread::render_text(r),
        DiffFormat::Json => spread::render_json(r),
        DiffFormat::Csv => spread::render_csv(r, separator),
    }
}
