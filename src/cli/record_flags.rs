//! The flags `collect` and `run` share for recording a run: where it goes, how often heap
//! profiles and memory are read, the burst mode near the limit, the disk budget, the label.

use std::path::PathBuf;
use std::time::Duration;

use heapwatch::units;

use super::CliError;

#[derive(clap::Args)]
pub struct RecordFlags {
    /// The run directory (created, or resumed when it exists).
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Time between heap captures.
    #[arg(long, default_value = heapwatch::model::run_options::DEFAULT_INTERVAL_FLAG, value_parser = units::parse_duration_flag)]
    pub interval: Duration,
    /// Interval once memory passes --burst-at of the limit.
    #[arg(long, default_value = "100ms", value_parser = units::parse_duration_flag)]
    pub burst_interval: Duration,
    /// Fraction of the limit at which burst mode starts.
    #[arg(long, default_value_t = 0.6)]
    pub burst_at: f64,
    /// Time between process / cgroup memory samples.
    #[arg(long, default_value = "50ms", value_parser = units::parse_duration_flag)]
    pub memory_interval: Duration,
    /// Disk budget for stored profiles; older boot cycles are thinned first.
    #[arg(long, value_parser = units::parse_size)]
    pub max_disk: Option<u64>,
    /// A label for this build (e.g. 2.1.0), kept in run.json for reports and comparisons.
    #[arg(long)]
    pub label: Option<String>,
    #[command(flatten)]
    pub own: RecordOwnFlags,
    /// No status line, no progress lines and no summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// `--own` of the commands that record (`collect`, `run`, `watch`): kept in run.json, where
/// every analysis of the run finds it.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RecordOwnFlags {
    /// Module path prefixes of your own code (repeat it, or give a comma list: `--own
    /// go.etcd.io/,github.com/openziti/`), kept in run.json: every analysis of the run names a
    /// site by its first frame in them (or in the main module) without being told again, and
    /// the run's site index is named by them. A resumed run keeps those it recorded.
    #[arg(long = "own", value_name = "PREFIX", value_delimiter = ',', value_parser = super::parse_own)]
    pub own: Vec<String>,
}

impl RecordOwnFlags {
    /// As run.json's `options.own`: none given is no field, so a resumed run keeps its own.
    pub fn recorded(&self) -> Option<Vec<String>> {
        (!self.own.is_empty()).then(|| self.own.clone())
    }
}

impl RecordFlags {
    /// Both intervals above zero.
    pub fn check_intervals(&self) -> Result<(), CliError> {
        if self.interval.is_zero() || self.burst_interval.is_zero() {
            return Err(CliError::Usage(
                "--interval and --burst-interval must be above zero".into(),
            ));
        }
        Ok(())
    }

    /// --burst-at a share of the limit.
    pub fn check_burst_at(&self) -> Result<(), CliError> {
        if !(self.burst_at > 0.0 && self.burst_at <= 1.0) {
            return Err(CliError::Usage(format!(
                "--burst-at {} must be in (0, 1]",
                self.burst_at
            )));
        }
        Ok(())
    }
}

/// Puts a command's flags in its help in the order given (argument ids), so the shared flags
/// sit where each command's help has always shown them; flags not named keep their place.
pub fn help_order(ids: &'static [&'static str]) -> impl FnMut(clap::Arg) -> clap::Arg {
    move |arg| match ids.iter().position(|id| arg.get_id() == *id) {
        Some(place) => arg.display_order(place),
        None => arg,
    }
}

#[cfg(test)]
mod tests {
    use clap::{Args, CommandFactory};

    #[test]
    fn run_and_collect_show_every_flag_in_its_place() {
        let cli = super::super::Cli::command();
        cli.clone().debug_assert();
        for (name, order) in [
            ("run", super::super::run::HELP_ORDER),
            ("collect", super::super::collect::HELP_ORDER),
        ] {
            let command = cli.find_subcommand(name).expect("the command exists");
            let flags: Vec<&str> = command
                .get_arguments()
                .filter(|a| !a.is_positional())
                .map(|a| a.get_id().as_str())
                .collect();
            for id in order {
                assert!(flags.contains(id), "{name}: --{id} is not a flag of it");
            }
            // Every flag has its place, but the decoding and pushing flags that follow in
            // collect, in the order they are declared.
            let following = clap::Command::new("following");
            let following = super::super::DecodeFlags::augment_args(following);
            let following = super::super::collect_push::CollectPushFlags::augment_args(following);
            for id in &flags {
                assert!(
                    order.contains(id) || following.get_arguments().any(|a| a.get_id() == id),
                    "{name}: --{id} has no place in its help"
                );
            }
            let mut shown: Vec<(usize, &str)> = command
                .get_arguments()
                .filter(|a| order.contains(&a.get_id().as_str()))
                .map(|a| (a.get_display_order(), a.get_id().as_str()))
                .collect();
            shown.sort();
            let shown: Vec<&str> = shown.into_iter().map(|s| s.1).collect();
            assert_eq!(shown, order, "{name}");
        }
    }
}
