//! `lockprof flamegraph`: folded stacks and SVGs of a recording, a live run,
//! or a before/after pair.

use std::path::{Path, PathBuf};

use clap::Parser as _;

use super::{UsageError, record::type_mask};
use crate::{
    cli::{Cli, Command, FlamegraphArgs},
    export::{FoldOptions, SvgOptions, diff_svg, folded_lines, svg},
    model::{Profile, parse_type},
    recording,
};

fn load(path: &Path) -> anyhow::Result<Profile> {
    Ok(recording::load(path).map_err(|e| UsageError(e.to_string()))?)
}

fn write(path: &Path, bytes: &[u8], what: &str) -> anyhow::Result<()> {
    std::fs::write(path, bytes).map_err(|e| UsageError(format!("cannot write {}: {e}", path.display())))?;
    eprintln!("lockprof: wrote {what} {}", path.display());
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

/// Records the live kernel with `record`'s defaults.
async fn live(duration: f64, types: &[String], verbose: u8) -> anyhow::Result<Profile> {
    let mut argv = vec!["lockprof".to_string(), "record".into(), format!("--duration={duration}")];
    if !types.is_empty() {
        argv.push(format!("--type={}", types.join(",")));
    }
    let cli = Cli::try_parse_from(argv).map_err(|e| UsageError(e.to_string()))?;
    let Command::Record(args) = cli.command else {
        return Err(UsageError("internal: not a record command".into()).into());
    };
    super::record::record_profile(&args, verbose).await
}

/// Draws the flamegraph(s).
pub async fn flamegraph(args: &FlamegraphArgs, verbose: u8) -> anyhow::Result<()> {
    type_mask(&args.types)?;
    let types = args.types.iter().filter_map(|t| parse_type(t)).collect();
    let fold = FoldOptions {
        metric: args.metric,
        lock_root: args.lock_root,
        offsets: args.offsets,
        lock: args.lock.clone(),
        types,
    };
    let out = match (&args.output, &args.folded) {
        (None, None) => Some(PathBuf::from(if args.diff.is_some() { "lockprof-diff.svg" } else { "lockprof.svg" })),
        (o, _) => o.clone(),
    };
    let mut svg_opts = SvgOptions { metric: args.metric, ..Default::default() };

    if let Some(pair) = &args.diff {
        let (before, after) = match pair.as_slice() {
            [b, a] => (load(b)?, load(a)?),
            _ => return Err(UsageError("--diff takes two recordings: BEFORE AFTER".into()).into()),
        };
        let (b, a) = (folded_lines(&before, &fold)?, folded_lines(&after, &fold)?);
        svg_opts.subtitle = Some(format!("before: {}; after: {}", subtitle(&before), subtitle(&after)));
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
        (None, Some(d)) if d.is_finite() && d > 0.0 => live(d, &args.types, verbose).await?,
        (None, Some(d)) => {
            return Err(UsageError(format!("--duration must be a positive number of seconds, not {d}")).into());
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
