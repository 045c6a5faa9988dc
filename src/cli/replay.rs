//! `heapwatch replay RUN --listen 127.0.0.1:PORT`: a recorded run served as a live Go target,
//! over HTTP pprof, or with `--agent unix:/path.sock` over the OpenZiti agent protocol.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use heapwatch::replay::Timeline;
use heapwatch::replay::server::{self, AgentListen, AgentReplayOptions, ReplayOptions};
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
    /// Serve the agent protocol instead of HTTP: unix:/path.sock or tcp:127.0.0.1:PORT.
    #[arg(long, value_name = "ADDR")]
    agent: Option<String>,
    /// The app id the replayed agent reports (op 0x0a); default: the run's label, else "replay".
    #[arg(long, requires = "agent")]
    app_id: Option<String>,
}

fn agent_listen(addr: &str) -> Result<AgentListen, CliError> {
    if let Some(path) = addr.strip_prefix("unix:").filter(|p| !p.is_empty()) {
        return Ok(AgentListen::Unix(PathBuf::from(path)));
    }
    if let Some(tcp) = addr.strip_prefix("tcp:") {
        let sock: SocketAddr = tcp.parse().map_err(|e| {
            CliError::Usage(format!("--agent {addr}: {e} (expected tcp:127.0.0.1:PORT)"))
        })?;
        if !sock.ip().is_loopback() {
            return Err(CliError::Usage(format!(
                "--agent {addr}: replay serves on loopback only (127.0.0.1 or [::1])"
            )));
        }
        return Ok(AgentListen::Tcp(sock));
    }
    Err(CliError::Usage(format!(
        "--agent {addr}: expected unix:/path.sock or tcp:127.0.0.1:PORT"
    )))
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
    let run = RunDir::open(&args.run)?;
    let timeline = Timeline::from_run(&run)?;
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
        .map_err(|e| CliError::Usage(format!("cannot install the Ctrl-C handler: {e}")))?;
    let mut announce = |line: String| {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let tally = match &args.agent {
        Some(addr) => {
            let options = AgentReplayOptions {
                listen: agent_listen(addr)?,
                speed: args.speed,
                die_mid_response: args.die_mid_response,
                app_id: args
                    .app_id
                    .clone()
                    .or_else(|| run.info.as_ref().and_then(|i| i.label.clone()))
                    .unwrap_or_else(|| "replay".into()),
                app_version: run.info.as_ref().and_then(|i| i.label.clone()),
            };
            server::serve_agent(&timeline, &options, stop, &mut announce).map_err(|source| {
                CliError::Serve {
                    addr: addr.to_string(),
                    source,
                }
            })?
        }
        None => {
            let options = ReplayOptions {
                listen: args.listen,
                speed: args.speed,
                die_mid_response: args.die_mid_response,
            };
            server::serve(&timeline, &options, stop, &mut announce).map_err(|source| {
                CliError::Serve {
                    addr: args.listen.to_string(),
                    source,
                }
            })?
        }
    };
    eprintln!(
        "heapwatch: replayed {} boot cycle(s), {} requests, {} cut mid-response",
        tally.cycles, tally.requests, tally.cut
    );
    Ok(ExitCode::SUCCESS)
}
