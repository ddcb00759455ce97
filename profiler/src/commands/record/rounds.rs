//! `record --rounds N` and `record -- COMMAND`: one recording per round,
//! each saved as it ends (`before.r1.lockprof`, ...), then the report: the
//! recording's own for one round, the rounds' spread per lock for several.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::{UsageError, command::CommandRounds, emit, open_output, record_until, save};
use crate::{
    cli::RecordArgs,
    clock,
    diff::{DiffFormat, Rounds, Side, SideOptions, render_rounds},
    model::{Profile, Round},
    recording::round_path,
    report::{Format, ReportOptions, render},
    session::SessionOptions,
    shutdown::{self, Hangup},
};

/// What cannot go with rounds or a command, said before anything attaches.
fn check(args: &RecordArgs) -> Result<(), UsageError> {
    if args.command.is_empty() && args.duration.is_none() {
        return Err(UsageError(
            "--rounds needs --duration SECS or a command (record --rounds N -- COMMAND): a round must end by itself"
                .into(),
        ));
    }
    if !args.incident.trigger.is_empty() {
        return Err(UsageError("--trigger records until an incident: it takes neither --rounds nor a command".into()));
    }
    if args.rounds > 1 && args.view.format == Format::Pprof {
        return Err(UsageError(
            "--rounds reports the rounds' spread (text, json or csv); pprof one round's file with `lockprof report \
             --input FILE.rK.lockprof --format pprof`"
                .into(),
        ));
    }
    Ok(())
}

/// Where round `k` of `n` is saved.
fn output_of(base: Option<&Path>, k: u32, n: u32) -> Option<PathBuf> {
    base.map(|b| if n == 1 { b.to_path_buf() } else { round_path(b, k) })
}

/// How rounds are run: for a duration, or for a command's lifetime.
enum Runner {
    Duration { secs: f64, stop: tokio_util::sync::CancellationToken },
    Command(Box<CommandRounds>),
}

/// Records the rounds and reports; the command's exit status (0 without one).
pub(super) async fn record_rounds(args: &RecordArgs) -> anyhow::Result<u8> {
    check(args)?;
    let n = args.rounds;
    let output = args.output.as_deref();
    // A command that cannot be found fails first (127, like a shell).
    let mut runner = if args.command.is_empty() {
        let secs = args.duration.unwrap_or(1.0);
        let (stop, _) = shutdown::on_signal(Hangup::Stop).context("catching SIGINT, SIGTERM and SIGHUP")?;
        Runner::Duration { secs, stop }
    } else {
        Runner::Command(Box::new(CommandRounds::new(args)?))
    };
    // The first round's file is opened before anything attaches: a path that
    // cannot be written fails now (the others, beside it, round by round).
    let mut first = open_output(output_of(output, 1, n).as_deref())?;
    let set = format!("{}-{}", clock::unix_ms(), std::process::id());
    let mut done: Vec<(String, Profile)> = Vec::new();
    let (mut code, mut unsaved) = (0u8, None);
    // A round that fails after others were recorded ends the rounds; the
    // finished ones are still reported, and then the failure is.
    let mut failed_round: Option<anyhow::Error> = None;
    for k in 1..=n {
        let out = match first.take() {
            Some(f) => Some(f),
            None if k == 1 => None,
            None => match open_output(output_of(output, k, n).as_deref()) {
                Ok(o) => o,
                Err(e) => {
                    failed_round = Some(e.into());
                    break;
                }
            },
        };
        let what = if n > 1 { format!(" round {k} of {n}") } else { String::new() };
        let recorded = match &mut runner {
            Runner::Duration { secs, stop } => match SessionOptions::try_from(&args.session) {
                Ok(opts) => {
                    record_until(opts, Some(*secs), stop, &what).await.map(|(p, _)| Some((p, stop.is_cancelled())))
                }
                Err(e) => Err(e.into()),
            },
            Runner::Command(c) => c.round(k, &what).await.map(|r| {
                r.map(|(p, ended)| {
                    code = ended.code;
                    let failed = ended.code != 0;
                    if failed && k < n {
                        shutdown::say(&format!("lockprof: the command ended with {}: no more rounds", ended.text));
                    }
                    (p, c.stopped() || failed)
                })
            }),
        };
        let (mut profile, stopped) = match recorded {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(e) if done.is_empty() => return Err(e),
            Err(e) => {
                failed_round = Some(e);
                break;
            }
        };
        if n > 1 {
            profile.meta.round = Some(Round { index: k, of: n, set: set.clone() });
            shutdown::say(&format!(
                "lockprof: round {k} of {n}: {} contentions on {} locks in {:.2} s",
                profile.contended(),
                profile.locks.len(),
                profile.meta.duration_s
            ));
        }
        let name = out.as_ref().map_or_else(|| format!("round {k}"), |o| o.path().display().to_string());
        if let Some(out) = out {
            unsaved = unsaved.or(save(out, &profile));
        }
        done.push((name, profile));
        if stopped {
            if k < n {
                shutdown::say(&format!("lockprof: stopped after round {k} of {n}"));
            }
            break;
        }
    }
    if let Runner::Command(c) = &runner
        && done.is_empty()
    {
        // A signal before the command could start: it never ran.
        return Err(c.not_run().into());
    }
    let report = match done.as_slice() {
        [(_, p)] if n == 1 => render(p, &ReportOptions::from(&args.view))?,
        _ => {
            let side = Side::new(&done, &SideOptions::default());
            let format = match args.view.format {
                Format::Json => DiffFormat::Json,
                Format::Csv => DiffFormat::Csv,
                _ => DiffFormat::Text,
            };
            let mut text = render_rounds(&Rounds::of(&side, args.view.top), format, args.view.separator);
            if format == DiffFormat::Text
                && let Some(o) = output
            {
                text.push_str(&format!(
                    "\ncompare with another set of rounds: lockprof diff {} OTHER{}\n",
                    o.display(),
                    o.extension().map_or(String::new(), |e| format!(".{}", e.to_string_lossy()))
                ));
            }
            text.into_bytes()
        }
    };
    emit(&report, None)?;
    if let Some(e) = failed_round {
        return Err(e.context(format!("after {} round(s), reported above", done.len())));
    }
    match unsaved {
        Some(e) => Err(e.into()),
        None => Ok(code),
    }
}
