//! `lockprof diff`: recordings before and after a change, compared lock by
//! lock (or caller by caller), with p-values over rounds.

use std::path::PathBuf;

use super::{UsageError, emit};
use crate::{
    cli::DiffArgs,
    diff::{DiffOptions, SideOptions, compare, render, sides},
    model::Profile,
    recording::{self, Loaded},
    shutdown::say,
};

/// The two sides' paths: `--before ... --after ...`, or `OLD NEW`.
pub(crate) fn side_paths(
    pair: &[PathBuf],
    before: &[PathBuf],
    after: &[PathBuf],
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), UsageError> {
    match (pair, before.is_empty(), after.is_empty()) {
        ([old, new], true, true) => Ok((vec![old.clone()], vec![new.clone()])),
        ([], false, false) => Ok((before.to_vec(), after.to_vec())),
        _ => Err(UsageError(
            "give two recordings, OLD NEW, or the rounds of each side: --before REC... --after REC...".into(),
        )),
    }
}

/// Reads one side (sets of rounds expanded), saying what was odd about it.
pub(crate) fn load_side(name: &str, paths: &[PathBuf]) -> Result<Vec<(String, Profile)>, UsageError> {
    let Loaded { recordings, notes } = recording::load_side(paths).map_err(|e| UsageError(e.to_string()))?;
    for n in notes {
        say(&format!("lockprof: {name}: {n}"));
    }
    Ok(recordings)
}

/// Compares the sides and writes the comparison.
pub fn diff(args: &DiffArgs) -> anyhow::Result<()> {
    let (before, after) = side_paths(&args.pair, &args.before, &args.after)?;
    let (before, after) = (load_side("before", &before)?, load_side("after", &after)?);
    let so = SideOptions { by: args.by, lock: args.lock.clone() };
    let opts = DiffOptions {
        metric: args.metric,
        alpha: args.alpha,
        min_per_round: args.min_per_round,
        by: args.by,
        top: args.top,
    };
    let (b, a) = sides(&before, &after, &so);
    let d = compare(&b, &a, &opts);
    if d.rows.is_empty() && args.lock.is_some() {
        say("lockprof: no lock matches --lock on either side");
    }
    emit(render(&d, args.format, args.separator).as_bytes(), args.output.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sides_come_from_the_pair_or_the_lists() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(side_paths(&[p("a"), p("b")], &[], &[]).expect("pair"), (vec![p("a")], vec![p("b")]));
        let lists = side_paths(&[], &[p("a1"), p("a2")], &[p("b1")]).expect("lists");
        assert_eq!(lists, (vec![p("a1"), p("a2")], vec![p("b1")]));
        assert!(side_paths(&[p("a")], &[], &[]).is_err_and(|e| e.0.contains("OLD NEW")));
        assert!(side_paths(&[], &[], &[]).is_err());
    }
}
