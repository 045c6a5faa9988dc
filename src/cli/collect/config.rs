//! What `collect`'s flags come to: the collector's settings (`CollectConfig`), one
//! `TargetSpec` per target with its own `--limit`, `--pid` and `--cgroup`, the run's options,
//! the OOM hold and the push, all checked before anything starts. The flags themselves, the
//! live status line and the run are the parent's.

use std::path::PathBuf;
use std::time::Duration;

use heapwatch::collect::CollectConfig;
use heapwatch::collect::cluster::{StartOptions, TargetSpec, node_names};
use heapwatch::collect::marks;
use heapwatch::collect::targets::TargetOptions;
use heapwatch::launch::hold;
use heapwatch::source::http::HttpOptions;
use heapwatch::units;

use super::super::CliError;
use super::super::collect_push::PushSetup;
use super::{CollectArgs, start_error, usage};

/// Collect's flags, checked: what the run starts from.
pub(super) struct Plan {
    /// Each target's node name, in the order given.
    pub names: Vec<String>,
    pub specs: Vec<TargetSpec>,
    pub options: StartOptions,
    /// The one target's memory cgroup to hold at its OOM kill, and for how long at most.
    pub oom_hold: Option<(PathBuf, Duration)>,
    pub push: Option<PushSetup>,
}

impl CollectArgs {
    /// Every flag checked and turned into what `collect::start` takes, in the order the
    /// errors are found: the collector's settings, the push, the names, each target's own
    /// flags, the OOM hold, the HTTP options, the logs and marks.
    pub(super) fn plan(&self) -> Result<Plan, CliError> {
        let config = self.config()?;
        let push = self.push.prepare(self.decode.limits())?;
        let names = node_names(&self.targets, &self.names).map_err(start_error)?;
        let cluster = names.len() > 1;
        let limits = per_node("--limit", &self.limit, &names, true)?
            .into_iter()
            .map(|v| {
                v.map(|v| units::parse_size(&v).map_err(|e| usage(format!("--limit {v}: {e}"))))
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pids = per_node("--pid", &self.pid, &names, false)?
            .into_iter()
            .map(|v| {
                v.map(|v| {
                    v.parse::<u32>()
                        .map_err(|_| usage(format!("--pid {v}: expected a process id")))
                })
                .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cgroups = per_node("--cgroup", &self.cgroup, &names, false)?;
        let oom_hold = match self.oom_hold.filter(|d| !d.is_zero()) {
            None => None,
            Some(_) if cluster => {
                return Err(usage(
                    "--oom-hold holds one target's cgroup; give it with one target".into(),
                ));
            }
            Some(max) => {
                let dir = cgroups[0]
                    .as_ref()
                    .map(PathBuf::from)
                    .or_else(|| {
                        self.targets[0]
                            .as_str()
                            .strip_prefix("proc:cgroup:")
                            .map(PathBuf::from)
                    })
                    .ok_or_else(|| {
                        usage(
                            "--oom-hold needs the target's memory cgroup: --cgroup PATH, or a \
                             proc:cgroup:PATH target"
                                .into(),
                        )
                    })?;
                hold::check_holdable(&dir).map_err(usage)?;
                Some((dir, max))
            }
        };
        let http = self.http_options()?;
        let specs: Vec<TargetSpec> = self
            .targets
            .iter()
            .enumerate()
            .map(|(i, target)| TargetSpec {
                name: names[i].clone(),
                target: target.clone(),
                options: TargetOptions {
                    http: http.clone(),
                    // In a cluster it is the agent targets' (a single target is told it is not one).
                    agent_dir: self
                        .agent_dir
                        .clone()
                        .filter(|_| !cluster || target.as_str().starts_with("agent:")),
                    pid: pids[i],
                    cgroup: cgroups[i].as_ref().map(PathBuf::from),
                    interval: config.interval,
                    timeout: config.timeout,
                },
                limit: limits[i],
            })
            .collect();
        let logs = self
            .logs
            .iter()
            .map(|l| marks::parse_log(l))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| usage(e.to_string()))?;
        let mark_specs = self
            .marks
            .iter()
            .map(|m| marks::parse_mark(m))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| usage(e.to_string()))?;
        let options = StartOptions {
            out: self.record.out.clone(),
            run_options: heapwatch::model::run_options::RunOptions {
                interval_ms: Some(config.interval.as_millis() as u64),
                burst_interval_ms: Some(config.burst_interval.as_millis() as u64),
                burst_at: Some(config.burst_at),
                max_duty: Some(config.max_duty),
                idle_backoff: Some(config.idle_backoff),
                cpu_limit: self
                    .cpu_limit
                    .map(heapwatch::model::run_options::CpuLimit::from),
                timeout_ms: Some(config.timeout.as_millis() as u64),
                profiles: Some(self.profiles.clone()),
                memstats_interval_ms: Some(config.memstats_interval.as_millis() as u64),
                agent_dir: self.agent_dir.as_ref().map(|p| p.display().to_string()),
                max_disk: config.max_disk,
                gc: Some(self.gc),
                own: self.record.own.recorded(),
                ..Default::default()
            },
            config,
            memory_interval: self.record.memory_interval,
            label: self.record.label.clone(),
            logs,
            marks: mark_specs,
            retarget: self.retarget,
        };
        Ok(Plan {
            names,
            specs,
            options,
            oom_hold,
            push,
        })
    }

    fn config(&self) -> Result<CollectConfig, CliError> {
        self.record.check_intervals()?;
        if !(self.max_duty > 0.0 && self.max_duty <= 1.0) {
            return Err(usage(format!(
                "--max-duty {} must be in (0, 1]",
                self.max_duty
            )));
        }
        self.record.check_burst_at()?;
        let mut heap = false;
        let mut goroutine = false;
        for p in &self.profiles {
            match p.trim() {
                "heap" => heap = true,
                "goroutine" => goroutine = true,
                other => {
                    return Err(usage(format!(
                        "--profiles: unknown profile {other:?} (heap, goroutine)"
                    )));
                }
            }
        }
        Ok(CollectConfig {
            interval: self.record.interval,
            burst_interval: self.record.burst_interval,
            burst_at: self.record.burst_at,
            // Each target's own, from --limit [NAME=]SIZE.
            limit: None,
            timeout: self.timeout,
            heap: heap || !goroutine,
            goroutine,
            goroutine_interval: self.goroutine_interval,
            memstats_interval: self.memstats_interval,
            duration: self.duration,
            until_exit: self.until_exit.then_some(self.grace),
            max_disk: self.record.max_disk,
            max_duty: self.max_duty,
            idle_backoff: self.idle_backoff.max(1),
            decode: self.decode.limits(),
            // Each node's from its run.json (`cluster::open_node`): a resumed run's own.
            own: Vec::new(),
        })
    }

    fn http_options(&self) -> Result<HttpOptions, CliError> {
        Ok(HttpOptions {
            headers: super::super::headers::read_headers("--header", &self.headers)?,
            cacert: self.cacert.clone(),
            client_cert: self.cert.clone(),
            client_key: self.key.clone(),
            insecure: self.insecure,
            force_gc: self.gc,
            max_body: self.max_body,
        })
    }
}

/// A per-target flag's values, one per node: `NAME=VALUE` names the node; a plain VALUE is the
/// only target's, or with `plain_for_all` every node's that has none of its own.
fn per_node(
    flag: &str,
    values: &[String],
    names: &[String],
    plain_for_all: bool,
) -> Result<Vec<Option<String>>, CliError> {
    let mut out: Vec<Option<String>> = vec![None; names.len()];
    let mut plain: Option<&str> = None;
    let list = names.join(", ");
    for value in values {
        let named = value
            .split_once('=')
            .and_then(|(n, v)| Some((names.iter().position(|x| x == n)?, v)));
        if let Some((i, v)) = named {
            if out[i].is_some() {
                return Err(usage(format!("{flag} is given twice for {}", names[i])));
            }
            out[i] = Some(v.to_string());
        } else if names.len() > 1 && !plain_for_all {
            return Err(usage(format!(
                "{flag} {value}: with several targets, say which: {flag} NAME=VALUE \
                 (NAME one of {list})"
            )));
        } else if names.len() > 1 && value.contains('=') {
            let name = value.split('=').next().unwrap_or_default();
            return Err(usage(format!(
                "{flag} {value}: no target is named {name:?} (the names: {list})"
            )));
        } else if plain.replace(value).is_some() {
            return Err(usage(format!("{flag} is given twice")));
        }
    }
    Ok(out
        .into_iter()
        .map(|v| v.or_else(|| plain.map(str::to_string)))
        .collect())
}
