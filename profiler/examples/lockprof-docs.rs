//! `lockprof-docs DIR`: writes lockprof's man pages (`DIR/man1`) and shell
//! completions (`DIR/completions`), generated from its clap definitions.
//! Run by `cargo xtask dist` (an example: never in the product or installed with it).

use std::path::PathBuf;

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        bail!("usage: lockprof-docs DIR");
    };
    let dir = PathBuf::from(dir);
    let written = lockprof::cli::docs::write_all(&dir).with_context(|| format!("writing into {}", dir.display()))?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(())
}
