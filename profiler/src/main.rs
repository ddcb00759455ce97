//! `lockprof`: parse the command line, set up logging, run, map errors to exit codes.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use lockprof::{
    cli::{Cli, Command, UsageError},
    commands,
    ebpf::LoadError,
    launch::LaunchError,
    session::SessionError,
};

fn exit_code(err: &anyhow::Error) -> u8 {
    if let Some(e) = err.downcast_ref::<LaunchError>() {
        return e.exit_code();
    }
    let privileges = |e: &LoadError| matches!(e, LoadError::Privileges(_));
    if err.downcast_ref::<UsageError>().is_some()
        || err.downcast_ref::<LoadError>().is_some_and(privileges)
        || matches!(err.downcast_ref::<SessionError>(), Some(SessionError::Load(e)) if privileges(e))
        || matches!(err.downcast_ref::<SessionError>(), Some(SessionError::Incidents(_)))
    {
        2
    } else {
        1
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    commands::runtime().context("starting the async runtime")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The live commands handle SIGINT, SIGTERM and SIGHUP from the moment
    // they start: until their handler is set, those signals wait.
    if matches!(&cli.command, Command::Record(_) | Command::Top(_) | Command::Serve(_))
        || matches!(&cli.command, Command::Flamegraph(f) if f.duration.is_some())
    {
        lockprof::shutdown::hold();
    }
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        _ => log::LevelFilter::Debug,
    };
    let mut logger = env_logger::Builder::new();
    logger.filter_level(level).parse_default_env();
    if let Command::Top(t) = &cli.command {
        // The screen belongs to the dashboard: logs go to --log-file or nowhere.
        match t.log_file.as_ref().map(std::fs::File::create) {
            Some(Ok(f)) => {
                logger.target(env_logger::Target::Pipe(Box::new(f)));
            }
            Some(Err(e)) => {
                eprintln!("lockprof: cannot write the log file: {e}");
                return ExitCode::from(2);
            }
            None => {
                logger.filter_level(log::LevelFilter::Off);
            }
        }
    }
    logger.init();

    let result = match &cli.command {
        Command::Report(a) => commands::report(a).map(|()| 0),
        Command::Diff(a) => commands::diff(a).map(|()| 0),
        Command::Doctor(a) => commands::doctor(a).map(|()| 0),
        Command::Stress(a) => commands::stress(a).map(|()| 0),
        // Builds its runtime itself, once attached and unprivileged.
        Command::Serve(a) => commands::serve(a).map(|()| 0),
        // With a command, its exit status.
        Command::Record(a) => runtime().and_then(|rt| rt.block_on(commands::record(a))),
        Command::Top(a) => runtime().and_then(|rt| rt.block_on(commands::top(a))).map(|()| 0),
        Command::Flamegraph(a) => runtime().and_then(|rt| rt.block_on(commands::flamegraph(a))).map(|()| 0),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            lockprof::shutdown::say(&format!("lockprof: {e:#}"));
            ExitCode::from(exit_code(&e))
        }
    }
}
