//! `lockprof flamegraph`: folded stacks and SVGs of a recording, a live run,
//! or a before/after pair.

use std::path::{Path, PathBuf};

use super::UsageError;
use crate::{
    cli::FlamegraphArgs,
    export::{FoldOptions, SvgOptions, diff_svg, folded_lines, mean_per_round, svg},
    model::Profile,
    query::Query,
    recording,
    session::SessionOptions,
};

fn load(path: &Path) -> anyhow::Result<Profile> {
    Ok(recording::load(path).map_err(|e| UsageError(e.to_string()))?)
}

fn write(path: &Path, bytes: &[u8], what: &str) -> anyhow::Result<()> {
    super::write_file(path, bytes)?;
    crate::shutdown::say(&format!("lockprof: wrote {what} {}", path.display()));
    Ok(())
}

fn subtitle(p: &Profile) -> String {
    format!(
        "{} contentions in {:.1} s on {} (kernel {}, {} {})",
        p.contended(),
        p.meta.duration_s,
        if p.meta.hostname.is_empty() { "?" } else { &p.meta.hostname },
        p.meta.kernel,
        p.meta.backend,
        p.meta.mode
    )
}

/// A side's subtitle: its recording's, or how many rounds were merged.
fn side_subtitle(side: &[(String, Profile)]) -> String {
    match side {
        [(_, p)] => subtitle(p),
        _ => {
            let secs: f64 = side.iter().map(|(_, p)| p.meta.duration_s).sum::<f64>() / side.len().max(1) as f64;
            let mut kernels: Vec<&str> = side.iter().map(|(_, p)| p.meta.kernel.as_str()).collect();
            kernels.dedup();
            format!("{} rounds of {secs:.1} s, the mean per round (kernel {})", side.len(), kernels.join(", "))
        }
    }
}

/// A side's folded lines: its rounds' mean per round.
fn side_lines(side: &[(String, Profile)], fold: &FoldOptions) -> anyhow::Result<Vec<String>> {
    let rounds = side.iter().map(|(_, p)| folded_lines(p, fold)).collect::<Result<Vec<_>, _>>()?;
    Ok(mean_per_round(&rounds))
}

/// Draws the flamegraph(s).
pub async fn flamegraph(args: &FlamegraphArgs) -> anyhow::Result<()> {
    let live_only = args.session.live_only_changes();
    if args.duration.is_none() && !live_only.is_empty() {
        return Err(
            UsageError(format!("{} only apply when recording live (--duration SECS)", live_only.join(", "))).into()
        );
    }
    let fold = FoldOptions {
        metric: args.metric,
        lock_root: args.lock_root,
        cgroup_root: args.cgroup_root,
        offsets: args.offsets,
        query: Query { lock: args.lock.clone(), types: args.session.types.clone(), ..Query::default() },
    };
    let differential = args.diff.is_some() || !args.before.is_empty();
    let out = match (&args.output, &args.folded) {
        (None, None) => Some(PathBuf::from(if differential { "lockprof-diff.svg" } else { "lockprof.svg" })),
        (o, _) => o.clone(),
    };
    let mut svg_opts = SvgOptions { metric: args.metric, ..Default::default() };

    if differential {
        let (before, after) =
            super::diff::side_paths(args.diff.as_deref().unwrap_or_default(), &args.before, &args.after)?;
        let (before, after) = (super::diff::load_side("before", &before)?, super::diff::load_side("after", &after)?);
        let (b, a) = (side_lines(&before, &fold)?, side_lines(&after, &fold)?);
        svg_opts.subtitle = Some(format!("before: {}; after: {}", side_subtitle(&before), side_subtitle(&after)));
        let (svg_bytes, diff_lines) = diff_svg(&b, &a, &svg_opts)?;
        if let Some(p) = &args.folded {
            write(p, (diff_lines.join("\n") + "\n").as_bytes(), "differential folded stacks")?;
        }
        if let Some(p) = &out {
            write(p, &svg_bytes, "differential flamegraph")?;
        }
        return Ok(());
    }

    let profile = match (&args.input, args.duration) {
        (Some(i), _) => load(i)?,
        (None, Some(d)) => {
            let opts = SessionOptions::try_from(&args.session)?;
            super::record::record_profile(opts, Some(d), None).await?.profile
        }
        (None, None) => {
            return Err(UsageError("give --input FILE, --duration SECS or --diff BEFORE AFTER".into()).into());
        }
    };
    let lines = folded_lines(&profile, &fold)?;
    if lines.is_empty() {
        eprintln!("lockprof: nothing to draw (no contention matches); the outputs say so");
    }
    if let Some(p) = &args.folded {
        let mut text = lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        write(p, text.as_bytes(), "folded stacks")?;
    }
    if let Some(p) = &out {
        svg_opts.subtitle = Some(subtitle(&profile));
        write(p, &svg(&lines, &svg_opts)?, "flamegraph")?;
    }
    Ok(())
}
