//! `heapwatch replay RUN --listen 127.0.0.1:PORT`: a recorded run served as a live Go target.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use heapwatch::replay::Timeline;
use heapwatch::replay::server::{self, ReplayOptions};
use heapwatch::store::RunDir;

use super::CliError;

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// A run directory written by `heapwatch collect`.
    run: PathBuf,
    /// Loopback address to serve on (port 0 picks one; it is printed and kept across lives).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Playback speed: 2 plays twice as fast.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Cut the last answer of each boot cycle in half before dying, as an OOM kill would.
    #[arg(long)]
    die_mid_response: bool,
}

pub fn run(args: ReplayArgs) -> Result<ExitCode, CliError> {
    if !args.listen.ip().is_loopback() {
        return Err(CliError::Usage(format!(
            "--listen {}: replay serves on loopback only (127.0.0.1 or [::1])",
            args.listen
        )));
    }
    if !(args.speed > 0.0 && args.speed.is_finite()) {
        return Err(CliError::Usage(format!(
            "--speed {}: must be above zero",
            args.speed
        )));
    }
    let run = RunDir::open(&args.run).map_err(|e| CliError::Store(e.to_string()))?;
    let timeline = Timeline::from_run(&run).map_err(CliError::Store)?;
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
        .map_err(|e| CliError::Usage(format!("cannot install the Ctrl-C handler: {e}")))?;
    let options = ReplayOptions {
        listen: args.listen,
        speed: args.speed,
        die_mid_response: args.die_mid_response,
    };
    let mut announce = |line: String| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let tally = server::serve(&timeline, &options, stop, &mut announce)
        .map_err(|e| CliError::Store(format!("replay on {}: {e}", args.listen)))?;
    eprintln!(
        "heapwatch: replayed {} boot cycle(s), {} requests, {} cut mid-response",
        tally.lives, tally.requests, tally.cut
    );
    Ok(ExitCode::SUCCESS)
}
