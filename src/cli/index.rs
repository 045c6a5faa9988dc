//! `heapwatch index RUN`: brings a run's site index (`sites.idx`) up to date: cuts a torn tail,
//! builds the entries of captures recorded before the index existed or changed since. Every
//! analysis does the same on its own when it needs to; this is for doing it ahead of time.

use std::path::PathBuf;
use std::process::ExitCode;

use heapwatch::index;
use heapwatch::store::RunDir;

use super::{CliError, DecodeFlags, emit};

#[derive(clap::Args)]
pub struct IndexArgs {
    /// A run directory written by `heapwatch collect`.
    run: PathBuf,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    decode: DecodeFlags,
}

pub fn run(args: IndexArgs) -> Result<ExitCode, CliError> {
    let run = RunDir::open(&args.run)?;
    let done = index::rebuild(&run, &args.decode.limits())?;
    for problem in &done.unreadable {
        eprintln!("heapwatch: skipped {problem}");
    }
    let path = args.run.join(index::INDEX_FILE);
    emit(&if args.json {
        serde_json::to_string_pretty(&done).expect("plain data") + "\n"
    } else {
        let mut text = format!(
            "{}: {} captures indexed ({} already up to date, {} built now)\n",
            path.display(),
            done.captures,
            done.fresh,
            done.rebuilt
        );
        if done.repaired_bytes > 0 {
            text.push_str(&format!(
                "cut {} bytes of a torn or damaged tail\n",
                done.repaired_bytes
            ));
        }
        text
    })?;
    Ok(ExitCode::SUCCESS)
}
