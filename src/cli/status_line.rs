//! The live status of a recording (`collect`'s and `run`'s): one row per node, a spinner on a
//! terminal, a plain line elsewhere; each process end a line of its own that stays; and the
//! count of attempts each command prints when it ends (`attempts_line`).
//!
//! **Progress off the terminal** is the status line printed plainly every 10 s (a hidden
//! `--progress-every` sets it for tests); `--quiet` silences it. `run` has the same line as
//! `collect`, its starts and ends printed above it. What the line says, and how it is fitted to
//! the terminal (`fit`), is `src/collect/status.rs`'s doc.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use heapwatch::collect::marks;
use heapwatch::collect::{CollectSummary, LiveStatus, Observer};
use heapwatch::render::ends::{ProcessEnd, process_end_words};
use heapwatch::store::CaptureRecord;
use heapwatch::units::format_bytes;

/// One node's row of the live status: a spinner on a terminal; elsewhere (a CI log, a file)
/// a plain line every `progress_every`, naming the node in a cluster run.
struct StatusLine {
    /// The node's name in a cluster run (none for a single target).
    name: Option<String>,
    bar: Option<ProgressBar>,
    /// Off the terminal: how often, and when the last plain line was printed.
    plain: Option<(Duration, Option<std::time::Instant>)>,
    /// The `--log` files not there yet, said with the plain line (by the first row only).
    awaited: Option<marks::AwaitedLogs>,
    /// Each process end gets a line of its own that stays (`run` says them itself).
    tell_ends: bool,
    quiet: bool,
}

/// The status rows of every node.
pub(crate) struct Status {
    rows: Vec<StatusLine>,
    /// Every bar, to clear at the end.
    bars: Vec<ProgressBar>,
}

impl Status {
    pub(crate) fn new(quiet: bool, progress_every: Duration, names: &[String]) -> Status {
        let cluster = names.len() > 1;
        let name = |n: &String| cluster.then(|| n.clone());
        if quiet || !std::io::stderr().is_terminal() {
            let plain = (!quiet).then_some((progress_every, None));
            let rows = names
                .iter()
                .map(|n| StatusLine {
                    name: name(n),
                    bar: None,
                    plain,
                    awaited: None,
                    tell_ends: true,
                    quiet,
                })
                .collect();
            return Status {
                rows,
                bars: Vec::new(),
            };
        }
        let multi = MultiProgress::new();
        let width = names.iter().map(String::len).max().unwrap_or(0);
        let mut rows = Vec::new();
        let mut bars = Vec::new();
        for n in names {
            let template = if cluster {
                "{spinner} {prefix} {msg}"
            } else {
                "{spinner} {msg}"
            };
            let bar = ProgressBar::new_spinner();
            bar.set_style(ProgressStyle::with_template(template).expect("static template"));
            bar.set_prefix(format!("{n:width$}"));
            let bar = if cluster { multi.add(bar) } else { bar };
            bar.enable_steady_tick(Duration::from_millis(200));
            bars.push(bar.clone());
            rows.push(StatusLine {
                name: name(n),
                bar: Some(bar),
                plain: None,
                awaited: None,
                tell_ends: true,
                quiet,
            });
        }
        Status { rows, bars }
    }

    pub(super) fn await_logs(&mut self, logs: marks::AwaitedLogs) {
        if let Some(row) = self.rows.first_mut().filter(|r| r.plain.is_some()) {
            row.awaited = Some(logs);
        }
    }

    /// A line that stays, printed above the status rows (never through them).
    pub(crate) fn println(&self, line: &str) {
        match self.bars.first() {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// The rows leave process ends to whoever prints them (`run`'s supervisor).
    pub(crate) fn ends_told_elsewhere(&mut self) {
        for row in &mut self.rows {
            row.tell_ends = false;
        }
    }

    pub(crate) fn observers(&mut self) -> Vec<Box<dyn Observer + Send>> {
        std::mem::take(&mut self.rows)
            .into_iter()
            .map(|r| Box::new(r) as Box<dyn Observer + Send>)
            .collect()
    }

    pub(crate) fn finish(&self) {
        for bar in &self.bars {
            bar.finish_and_clear();
        }
    }
}

/// The status line's parts in the order shown, each with its rank: when the line must be
/// shortened to fit the terminal, the highest ranks go first.
fn status_parts(status: &LiveStatus) -> Vec<(u8, String)> {
    let mut parts = vec![(0, format!("{} captures", status.captures))];
    if status.gone {
        parts.push((0, "target gone".into()));
    }
    if let Some(h) = status.heap_inuse {
        parts.push((1, format!("heap {}", format_bytes(h))));
    }
    if let Some(rate) = status.growth_bps {
        parts.push((4, format!("{}/s", format_bytes(rate as i64))));
    }
    let fmt = |b: u64| format_bytes(b as i64);
    match (status.cgroup_usage(), status.memory_total, status.limit) {
        // The cgroup's usage is what its limit counts; the part that cannot be reclaimed is
        // said only when it is a part (smaller than the whole).
        (Some(charged), _, limit) => {
            let mut s = format!("cgroup {}", fmt(charged));
            if let Some(l) = limit {
                s.push_str(&format!(" of {}", fmt(l)));
            }
            parts.push((1, s));
            if let Some(m) = status.memory.filter(|&m| m + (1 << 20) <= charged) {
                parts.push((4, format!("{} of it not reclaimable", fmt(m))));
            }
        }
        // A process's RSS holds its binary's mapped text: said as RSS, not set against a
        // limit that counts a cgroup.
        (None, Some(rss), limit) => parts.push((
            1,
            match limit {
                Some(l) => format!("RSS {}, limit {}", fmt(rss), fmt(l)),
                None => format!("RSS {}", fmt(rss)),
            },
        )),
        (None, None, limit) => {
            if let Some(m) = status.memory {
                parts.push((
                    1,
                    match limit {
                        Some(l) => format!("memory {} of {}", fmt(m), fmt(l)),
                        None => format!("memory {}", fmt(m)),
                    },
                ));
            }
        }
    }
    if status.at_limit() {
        parts.push((0, "at limit".into()));
    } else if let Some(secs) = status.time_to_limit() {
        parts.push((2, format!("limit in {secs:.0}s")));
    }
    if let Some((site, rate)) = &status.top_site {
        parts.push((
            4,
            format!("top {} +{}/s", short_site(site), format_bytes(*rate as i64)),
        ));
    }
    if let Some(g) = status.goroutines {
        parts.push((5, format!("{g} goroutines")));
    }
    parts.push((3, format!("cycle {}", status.cycle)));
    if status.bursting {
        parts.push((2, "BURST".into()));
    }
    if status.errors > 0 {
        parts.push((3, format!("{} errors", status.errors)));
    }
    if let Some(e) = &status.last_error {
        parts.push((6, format!("last error: {}", cut_at_word(e, 60))));
    }
    parts
}

/// A site's name as short as a status line needs: without its import path and the leaf
/// named beside it (`…/server.(*client).queueOutbound (leaf …)` is `server.(*client).queueOutbound`).
fn short_site(site: &str) -> &str {
    let own = site.split(" (leaf ").next().unwrap_or(site);
    // The import path ends at the last '/' before the package's name (not one inside it).
    let name_start = own.find(".(").or_else(|| own.rfind('.')).unwrap_or(0);
    own[..name_start]
        .rfind('/')
        .map_or(own, |slash| &own[slash + 1..])
}

/// At most `max` characters of `text`, cut at a word's end with `…` when cut.
fn cut_at_word(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    let cut = head
        .rfind(' ')
        .filter(|&at| at > max / 2)
        .unwrap_or(head.len());
    format!("{}…", head[..cut].trim_end())
}

/// The parts joined, dropping the highest ranks until the line fits `width` characters (a
/// line that fits never wraps, so a redraw or a resize leaves nothing behind).
fn fit(parts: &[(u8, String)], width: Option<usize>) -> String {
    let join = |keep: &dyn Fn(u8) -> bool| {
        parts
            .iter()
            .filter(|(rank, _)| keep(*rank))
            .map(|(_, p)| p.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let Some(width) = width else {
        return join(&|_| true);
    };
    let mut worst = parts.iter().map(|(r, _)| *r).max().unwrap_or(0);
    loop {
        let line = join(&|r| r <= worst);
        if line.chars().count() <= width || worst == 0 {
            return if line.chars().count() <= width {
                line
            } else {
                line.chars().take(width).collect()
            };
        }
        worst -= 1;
    }
}

fn describe(status: &LiveStatus) -> String {
    fit(&status_parts(status), None)
}

/// The columns of the terminal stderr is, when it is one.
fn terminal_width() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize on a valid descriptor and fails on any other.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(2, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// A process end as a line that stays: `cycle 3: pid 4242 OOM-killed (signal 9)`.
fn describe_end(record: &CaptureRecord) -> String {
    let pid = record
        .pid
        .map_or("the process".into(), |p| format!("pid {p}"));
    let how = process_end_words(&ProcessEnd::of_record(record));
    format!("cycle {}: {pid} {how}", record.cycle)
}

impl Observer for StatusLine {
    fn ended(&mut self, record: &CaptureRecord) {
        if self.quiet || !self.tell_ends {
            return;
        }
        let who = self
            .name
            .as_ref()
            .map(|n| format!("{n}: "))
            .unwrap_or_default();
        let line = format!("heapwatch: {who}{}", describe_end(record));
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn attempt(&mut self, _record: &CaptureRecord, status: &LiveStatus) {
        if let Some(bar) = &self.bar {
            // The spinner, the node's name and their spaces take the rest.
            let used = 2 + self.name.as_ref().map_or(0, |n| n.len() + 1);
            let width = terminal_width().map(|w| w.saturating_sub(used + 1));
            bar.set_message(fit(&status_parts(status), width));
        }
        if let Some((every, last)) = &mut self.plain {
            let now = std::time::Instant::now();
            if last.is_none_or(|t| now.duration_since(t) >= *every) {
                *last = Some(now);
                match &self.name {
                    Some(name) => eprintln!("heapwatch: {name}: {}", describe(status)),
                    None => eprintln!("heapwatch: {}", describe(status)),
                }
                for missing in self.awaited.iter_mut().flat_map(|a| a.missing_now()) {
                    eprintln!("heapwatch: {missing}");
                }
            }
        }
    }
}

/// Every attempt counted once: `N attempts: S stored, D duplicate(s), F runtime figure read(s),
/// E failed`, which add up to N.
pub(super) fn attempts_line(s: &CollectSummary) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{}: {} stored, {}, {}, {} failed",
        plural(s.attempts, "attempt", "attempts"),
        s.stored,
        plural(s.duplicates, "duplicate", "duplicates"),
        plural(s.figures, "runtime figure read", "runtime figure reads"),
        s.errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy() -> LiveStatus {
        let mut s = LiveStatus::default();
        s.captures = 1234;
        s.heap_inuse = Some(105 << 20);
        s.growth_bps = Some(3.0 * (1 << 20) as f64);
        s.memory = Some(180 << 20);
        s.memory_total = Some(250 << 20);
        s.limit = Some(256 << 20);
        s.goroutines = Some(3165);
        s.top_site = Some((
            "github.com/nats-io/nats-server/v2/server.(*client).queueOutbound (leaf \
             github.com/nats-io/nats-server/v2/server.init.func3)"
                .into(),
            2.5 * (1 << 20) as f64,
        ));
        s.cycle = 3;
        s.bursting = true;
        s.errors = 2;
        s.last_error = Some(
            "http://127.0.0.1:8222/debug/pprof/heap: connection refused while the target \
             restarted after its OOM kill"
                .into(),
        );
        s
    }

    #[test]
    fn the_status_line_fits_the_terminal_dropping_the_least_needed_parts() {
        let parts = status_parts(&busy());
        let full = fit(&parts, None);
        assert!(full.chars().count() > 80, "{full}");
        for width in [40, 60, 80, 120] {
            let line = fit(&parts, Some(width));
            assert!(line.chars().count() <= width, "{width}: {line}");
            assert!(line.starts_with("1234 captures"), "{line}");
        }
        let at_80 = fit(&parts, Some(80));
        assert!(at_80.contains("cgroup 250 MiB of 256 MiB"), "{at_80}");
        assert!(!at_80.contains("last error"), "{at_80}");
    }

    #[test]
    fn the_status_line_names_the_top_growing_site_briefly() {
        let line = fit(&status_parts(&busy()), None);
        assert!(
            line.contains("top server.(*client).queueOutbound +2.50 MiB/s"),
            "{line}"
        );
        assert_eq!(short_site("main.grow"), "main.grow");
        assert_eq!(short_site("example.com/a/b.(*T).m"), "b.(*T).m");
        assert_eq!(short_site("example.com/a/b.f (leaf runtime.x)"), "b.f");
    }

    #[test]
    fn an_oom_kill_gets_a_line_of_its_own() {
        let mut r = CaptureRecord::new(9, heapwatch::store::RecordKind::Exit, 3, 0);
        r.pid = Some(4242);
        r.signal = Some(9);
        r.totals.insert("oom_kill".into(), 1);
        assert_eq!(
            describe_end(&r),
            "cycle 3: pid 4242 OOM-killed (signal 9, the cgroup's oom_kill rose)"
        );
        r.totals.clear();
        assert_eq!(
            describe_end(&r),
            "cycle 3: pid 4242 killed by signal 9 (SIGKILL)"
        );
        r.signal = None;
        r.exit_code = Some(0);
        assert_eq!(describe_end(&r), "cycle 3: pid 4242 exited with code 0");
    }

    #[test]
    fn off_the_terminal_nothing_is_cut_mid_word() {
        let line = describe(&busy());
        let error = line.split("last error: ").nth(1).unwrap();
        assert!(error.ends_with('…'), "{error}");
        let kept = error.trim_end_matches('…');
        assert!(
            busy().last_error.unwrap().starts_with(kept) && kept.ends_with("refused"),
            "cut after a whole word: {kept:?}"
        );
        assert!(
            line.contains("cgroup 250 MiB of 256 MiB | 180 MiB of it not reclaimable"),
            "{line}"
        );
    }

    /// Issue 35, items 5a and 7b: "memory 277 MiB of 256 MiB … at limit" set a process's RSS
    /// (or the heap) against the cgroup's limit, and "memory 114 MiB (all charged 111 MiB)"
    /// gave a part larger than its whole. The cgroup's usage is what its limit counts; RSS is
    /// said as RSS and set against nothing.
    #[test]
    fn the_cgroups_usage_is_set_against_the_limit_and_rss_says_it_is_rss() {
        let mib = 1u64 << 20;
        let mut s = LiveStatus::default();
        s.captures = 10;
        s.heap_inuse = Some(114 << 20);
        s.memory = Some(114 * mib);
        s.memory_total = Some(111 * mib);
        s.limit = Some(256 * mib);
        let line = describe(&s);
        assert!(line.contains("cgroup 111 MiB of 256 MiB"), "{line}");
        assert!(
            !line.contains("of it not reclaimable"),
            "no part larger than its whole: {line}"
        );
        assert!(!line.contains("memory 114 MiB"), "{line}");
        // A process's RSS past the limit, its binary's text included: RSS, and not at the limit
        // while what can kill is under it.
        s.memory = Some(200 * mib);
        s.memory_total = Some(277 * mib);
        s.memory_total_is_rss = true;
        let line = describe(&s);
        assert!(line.contains("RSS 277 MiB, limit 256 MiB"), "{line}");
        assert!(!line.contains("277 MiB of 256 MiB"), "{line}");
        assert!(!line.contains("at limit"), "{line}");
        // Nothing from outside: the Go runtime's own figure against the limit.
        s.memory_total = None;
        s.memory_total_is_rss = false;
        assert!(describe(&s).contains("memory 200 MiB of 256 MiB"));
    }
}
