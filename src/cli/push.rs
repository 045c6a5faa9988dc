//! `heapwatch push RUN --to URL`: sends a recorded run's captures to a Pyroscope server after
//! the fact (from CI, or from a machine that had no route to the store during the repro).
//! Flags become a `push::Destination` and `push::PushOptions`; the library does the rest.
//!
//! Exit codes: 0 when every capture to send was delivered (or had been before); 2 when the
//! server refused some, in this push or an earlier one (each recorded in RUN/pushes.jsonl:
//! sending them again as they are would be refused again), some were sent and never answered
//! (they may be in the store), a profile file could not be read, or the server rejected the
//! credentials or the URL; 3 when it kept failing (5xx, timeouts, no connection) for
//! `--retry-for` without progress, with what is left unsent sent by the next run of the
//! same command.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use heapwatch::push::connect::Refusal;
use heapwatch::push::{self, PushOptions, PushStats, Retry};
use heapwatch::store::MANIFEST_FILE;
use heapwatch::units;

use super::push_flags::PushFlags;
use super::{CliError, DecodeFlags, emit};

#[derive(clap::Args)]
pub struct Args {
    /// The run directory; for a cluster run, every target under RUN/targets/ is pushed.
    run: PathBuf,
    /// Base URL of the Pyroscope server, http or https (the push API is under it at
    /// /push.v1.PusherService/Push). user:password@ in it becomes basic auth.
    #[arg(long, value_name = "URL")]
    to: String,
    #[command(flatten)]
    push: PushFlags,
    /// Send again the captures the server refused in an earlier push.
    #[arg(long)]
    retry_refused: bool,
    /// Send again the captures an earlier push sent without getting an answer (a drain that
    /// ran out): do it once you know the server did not store them.
    #[arg(long)]
    retry_unanswered: bool,
    /// Send the whole run again to this server, whatever RUN/pushes.jsonl says was delivered
    /// (a wiped server, new labels); a resend cut short is resumed by the next push.
    #[arg(long)]
    resend: bool,
    /// Give up after this long without a capture delivered or refused (the server down or
    /// failing); what is left goes with the next run of the same command.
    #[arg(long, default_value = "60s", value_parser = units::parse_duration_flag)]
    retry_for: Duration,
    #[command(flatten)]
    decode: DecodeFlags,
}

pub fn run(args: Args) -> Result<ExitCode, CliError> {
    let (destination, client) = args.push.client("--to", &args.to)?;
    let server = destination.server();
    let runs = runs_of(&args.run)?;
    let options = PushOptions {
        retry: Retry {
            refused: args.retry_refused,
            unanswered: args.retry_unanswered,
            everything: args.resend,
            restamping: false,
        },
        ..args
            .push
            .options(&server.to, Some(args.retry_for), args.decode.limits())?
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("starting the async runtime: {e}")))?;
    let client = Arc::new(client);
    let mut problems: Vec<CliError> = Vec::new();
    for run in &runs {
        let stats = runtime.block_on(push::push_run(
            run,
            server.clone(),
            Arc::clone(&client),
            options.clone(),
        ))?;
        emit(&format!("{}\n", summary(run, &stats)))?;
        let rejected = stats.rejected.is_some();
        problems.extend(problems_of(run, &server.to, &args, &stats));
        if rejected {
            break;
        }
    }
    // Every problem gets its line; the first decides the exit code.
    let mut problems = problems.into_iter();
    match problems.next() {
        None => Ok(ExitCode::SUCCESS),
        Some(first) => {
            for other in problems {
                eprintln!("heapwatch: {other}");
            }
            Err(first)
        }
    }
}

/// The run itself, or each target of a cluster run (RUN/targets/NAME/).
fn runs_of(run: &Path) -> Result<Vec<PathBuf>, CliError> {
    if run.join(MANIFEST_FILE).is_file() {
        return Ok(vec![run.to_path_buf()]);
    }
    let targets = run.join("targets");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&targets)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join(MANIFEST_FILE).is_file())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    if found.is_empty() {
        return Err(PushProblem::NotARun {
            run: run.to_path_buf(),
        }
        .into());
    }
    Ok(found)
}

/// `RUN → URL: 120 delivered, 3 refused as service_name "ctrl1" (the app id …); skipped 35
/// already sent`. The line `collect --push` will print at exit too.
pub fn summary(run: &Path, s: &PushStats) -> String {
    let mut line = format!(
        "{} → {}: {} delivered, {} refused",
        run.display(),
        s.to,
        s.delivered,
        s.refused
    );
    if s.unanswered > 0 {
        line.push_str(&format!(", {} sent without an answer", s.unanswered));
    }
    if s.unsent > 0 {
        line.push_str(&format!(", {} left unsent", s.unsent));
    }
    if !s.services.is_empty() {
        let named: Vec<String> = s
            .services
            .iter()
            .map(|(name, from)| format!("{name:?} ({})", from.words()))
            .collect();
        line.push_str(&format!(" as service_name {}", named.join(", ")));
    }
    let t = &s.tally;
    let mut skipped = Vec::new();
    if t.already_delivered > 0 {
        skipped.push(format!("{} already sent", t.already_delivered));
    }
    if t.already_refused > 0 {
        skipped.push(format!("{} refused before", t.already_refused));
    }
    if t.already_unanswered > 0 {
        skipped.push(format!(
            "{} sent before without an answer",
            t.already_unanswered
        ));
    }
    if t.duplicates > 0 {
        skipped.push(format!(
            "{} duplicates of an earlier capture (--skip-duplicates)",
            t.duplicates
        ));
    }
    if t.not_pprof > 0 {
        skipped.push(format!("{} stack dumps (text, not pprof)", t.not_pprof));
    }
    if t.deleted > 0 {
        skipped.push(format!("{} deleted by --max-disk", t.deleted));
    }
    if !skipped.is_empty() {
        line.push_str(&format!("; skipped {}", skipped.join(", ")));
    }
    if s.counter_resets > 0 {
        line.push_str(&format!(
            "; {} captures sent whole: their allocation counters fell within a boot cycle (a \
             new process)",
            s.counter_resets
        ));
    }
    if s.bases_lost > 0 {
        line.push_str(&format!(
            "; {} captures sent with no allocation change: the capture sent before each was \
             deleted by --max-disk since, so their change could not be taken without counting \
             it twice",
            s.bases_lost
        ));
    }
    if s.retries > 0 {
        line.push_str(&format!(" ({} retries)", s.retries));
    }
    line
}

/// What a push left undone, each with its facts; worded once, in its `Display`, for `push`'s
/// errors and `collect --push`'s summary alike.
#[derive(Debug)]
pub enum PushProblem {
    /// `push` was given a folder with no manifest, its own or its targets'.
    NotARun { run: PathBuf },
    /// The server took nothing more (credentials, URL, TLS).
    Rejected {
        to: String,
        refusal: Refusal,
        unsent: u64,
        run: PathBuf,
    },
    /// Captures the server refused in this push, each kind of refusal with its count.
    Refused {
        run: PathBuf,
        to: String,
        refused: u64,
        refusals: Vec<(Refusal, u64)>,
        restamping: bool,
    },
    /// Captures sent without an answer before the push ended: they may be in the store.
    Unanswered { n: u64, run: PathBuf, to: String },
    /// Captures an earlier push had refused, not sent again.
    RefusedEarlier { n: u64, run: PathBuf, to: String },
    /// Profile files that could not be read ("path: why" from the push), the first and how
    /// many more.
    Unreadable { first: String, more: usize },
}

impl PushProblem {
    fn refused(run: &Path, to: &str, s: &PushStats, restamping: bool) -> PushProblem {
        PushProblem::Refused {
            run: run.to_path_buf(),
            to: to.to_string(),
            refused: s.refused,
            refusals: s.refusals.clone(),
            restamping,
        }
    }
}

impl std::fmt::Display for PushProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pushes = |run: &Path| run.join(push::PUSHES_FILE);
        match self {
            PushProblem::NotARun { run } => write!(
                f,
                "{}: not a heapwatch run directory (no manifest.jsonl, no targets/*/manifest.jsonl)",
                run.display()
            ),
            PushProblem::Rejected {
                to,
                refusal,
                unsent,
                run,
            } => {
                let hint = match refusal.status {
                    401 | 403 => " (check --push-header and --push-tenant)".to_string(),
                    404 | 405 | 415 | 501 => format!(
                        " (is {to} the base URL of a Pyroscope server? The push API is at {to}{})",
                        push::connect::PUSH_PATH
                    ),
                    _ => String::new(),
                };
                write!(
                    f,
                    "{to} refused the push: {refusal}{hint}; {unsent} captures of {} left unsent",
                    run.display()
                )
            }
            // First what happened and what to do, then the server's words.
            PushProblem::Refused {
                run,
                to,
                refused,
                refusals,
                restamping,
            } => {
                let (first, n) = &refusals[0];
                let window = refusals
                    .iter()
                    .any(|(r, _)| r.message.contains("ingestion window"));
                if window && !restamping {
                    write!(
                        f,
                        "{refused} captures of {} refused by {to}: older than its ingestion \
                         window; --restamp sends them stamped with the push time (each refusal \
                         is recorded in {})",
                        run.display(),
                        pushes(run).display()
                    )?;
                } else {
                    write!(
                        f,
                        "{refused} captures of {} refused by {to}; sending them as they are \
                         would be refused again (each refusal is recorded in {}; \
                         --retry-refused sends them once changed)",
                        run.display(),
                        pushes(run).display()
                    )?;
                }
                write!(f, "\n  the server said: {first}")?;
                if refusals.len() > 1 {
                    write!(
                        f,
                        " ({n} of them; {} other kinds of refusal)",
                        refusals.len() - 1
                    )?;
                }
                Ok(())
            }
            PushProblem::Unanswered { n, run, to } => write!(
                f,
                "{n} captures of {} were sent to {to} and never answered before the push ended: \
                 they may be in the store. Look for them there by their capture times, in {} ({} \
                 lists their seqs, at the time the push gave up on them); if they are not, \
                 `heapwatch push {} --to {to} --retry-unanswered` sends them",
                run.display(),
                run.join(MANIFEST_FILE).display(),
                pushes(run).display(),
                run.display()
            ),
            PushProblem::RefusedEarlier { n, run, to } => write!(
                f,
                "{n} captures of {} were refused by {to} in an earlier push (recorded in {}); \
                 --restamp or --retry-refused sends them again",
                run.display(),
                pushes(run).display()
            ),
            PushProblem::Unreadable { first, more } => match more {
                0 => write!(f, "{first}"),
                n => write!(f, "{first} (and {n} more captures that could not be read)"),
            },
        }
    }
}

impl std::error::Error for PushProblem {}

/// What to do about captures sent without an answer, for `collect --push`'s summary.
pub fn unanswered_advice(n: u64, run: &Path, to: &str) -> String {
    PushProblem::Unanswered {
        n,
        run: run.to_path_buf(),
        to: to.to_string(),
    }
    .to_string()
}

/// The refusal of some captures, for `collect --push`'s summary.
pub fn refusal_message(run: &Path, to: &str, s: &PushStats, restamping: bool) -> String {
    PushProblem::refused(run, to, s, restamping).to_string()
}

fn problems_of(run: &Path, to: &str, args: &Args, s: &PushStats) -> Vec<CliError> {
    let mut problems = Vec::new();
    if let Some(refusal) = &s.rejected {
        problems.push(CliError::from(PushProblem::Rejected {
            to: to.to_string(),
            refusal: refusal.clone(),
            unsent: s.unsent,
            run: run.to_path_buf(),
        }));
    }
    if s.gave_up {
        problems.push(CliError::Unreachable(format!(
            "{to}: no capture delivered for {} (last: {}); {} captures of {} left unsent, \
             sent by the next `heapwatch push` of the run",
            units::format_duration(args.retry_for),
            s.last_failure.as_deref().unwrap_or("no answer"),
            s.unsent,
            run.display()
        )));
    }
    if s.refused > 0 {
        problems.push(PushProblem::refused(run, to, s, args.push.restamp).into());
    }
    if s.unanswered > 0 || s.tally.already_unanswered > 0 {
        problems.push(
            PushProblem::Unanswered {
                n: s.unanswered + s.tally.already_unanswered,
                run: run.to_path_buf(),
                to: to.to_string(),
            }
            .into(),
        );
    }
    if s.refused == 0 && s.tally.already_refused > 0 {
        // Not sent again, but the run is still not whole in the store: say so every time.
        problems.push(
            PushProblem::RefusedEarlier {
                n: s.tally.already_refused,
                run: run.to_path_buf(),
                to: to.to_string(),
            }
            .into(),
        );
    }
    if let Some(first) = s.unreadable.first() {
        problems.push(
            PushProblem::Unreadable {
                first: first.clone(),
                more: s.unreadable.len() - 1,
            }
            .into(),
        );
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pushes.jsonl holds when the push gave up on a capture (seconds after it was taken); a
    /// capture's own time, what a store is searched by, is in the manifest.
    #[test]
    fn the_unanswered_advice_sends_the_reader_to_the_manifest_for_capture_times() {
        let advice = unanswered_advice(3, Path::new("/runs/r"), "http://pyroscope:4040");
        assert!(
            advice.contains("by their capture times, in /runs/r/manifest.jsonl"),
            "{advice}"
        );
        assert!(
            advice.contains("/runs/r/pushes.jsonl lists their seqs, at the time the push gave up"),
            "{advice}"
        );
    }
}
