//! Analysis results paired with their words, as JSON carries them. The analysis holds figures
//! and typed evidence only; where a JSON object also carries a sentence (`verdict`, `summary`,
//! `why`, `meaning`), a view here writes the result's own fields (flattened) and then the
//! sentence, made by `render` from the finished result at serialisation. Every sentence stands
//! last in its object, as it always has, so the documents are unchanged byte for byte.

use serde::Serialize;

use crate::analyse::breakdown::{AtLimit, MemoryBreakdown};
use crate::analyse::compare::{AfterBaseline, Comparison, PairVerdict, Regression};
use crate::analyse::envoy::{
    ConfigVolume, EnvoyGrowth, EnvoyReport, EnvoyVerdict, HeapShare, WorkerMultiplier,
};
use crate::analyse::growth::{AcrossCycles, CycleGrowth, GrowthReport};
use crate::analyse::reading::Reading;
use crate::analyse::spikes::Episode;
use crate::analyse::stuck::Stuck;
use crate::analyse::triage::{
    ContainerTriage, CpuFinding, MemoryFinding, PodTriage, ProbeFinding, ReplicaFinding,
    Termination, TriageReport,
};
use crate::model::run_options::OwnNamed;
use crate::render::compare::{
    after_words, b_end_words, compared, pair_verdict, verdict, why_worse,
};
use crate::render::envoy_words::{
    config_meaning, heap_explanation, verdict_words, workers_meaning,
};
use crate::render::memory::{at_limit_words, breakdown_words};
use crate::render::stuck::stuck_words;
use crate::render::triage_words::container_words;
use crate::render::verdict::{across_summary, cycle_verdict};

/// A result with its words under `summary`.
#[derive(Serialize)]
pub struct Summary<'a, T> {
    #[serde(flatten)]
    pub of: &'a T,
    pub summary: String,
}

/// A result with its words under `verdict`.
#[derive(Serialize)]
pub struct Verdict<'a, T> {
    #[serde(flatten)]
    pub of: &'a T,
    pub verdict: String,
}

/// A result with its words under `why`.
#[derive(Serialize)]
pub struct Why<'a, T> {
    #[serde(flatten)]
    pub of: &'a T,
    pub why: String,
}

/// A result with its words under `meaning` (`null` where there are none).
#[derive(Serialize)]
pub struct Meaning<'a, T, W = String> {
    #[serde(flatten)]
    pub of: &'a T,
    pub meaning: W,
}

/// The growth report: `growth --json`'s document (beside Envoy's findings).
#[derive(Serialize)]
pub struct GrowthJson<'a> {
    pub schema: u32,
    pub limit_bytes: Option<u64>,
    pub cycles: Vec<CycleJson<'a>>,
    pub across: Summary<'a, AcrossCycles>,
    /// The prefixes named as the user's own code, and whence (`recorded`, `given`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own: Option<&'a OwnNamed>,
}

impl<'a> GrowthJson<'a> {
    pub fn new(report: &'a GrowthReport) -> GrowthJson<'a> {
        GrowthJson {
            schema: report.schema,
            limit_bytes: report.limit_bytes,
            cycles: report
                .cycles
                .iter()
                .map(|c| CycleJson::new(c, report.limit_bytes))
                .collect(),
            across: Summary {
                of: &report.across,
                summary: across_summary(&report.cycles, &report.across),
            },
            own: report.own.as_ref(),
        }
    }
}

/// One boot cycle: its figures (those `CycleGrowth` serialises itself), then the ones it
/// leaves here, with the memory words, then the verdict.
#[derive(Serialize)]
pub struct CycleJson<'a> {
    #[serde(flatten)]
    pub cycle: &'a CycleGrowth,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<Summary<'a, MemoryBreakdown>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_limit: Option<Summary<'a, AtLimit>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck: Option<Summary<'a, Stuck>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_peak_anon: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub episode: Option<&'a Episode>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub other_episodes: &'a [Episode],
    pub reading: Option<&'a Reading>,
    pub verdict: String,
}

impl<'a> CycleJson<'a> {
    pub fn new(c: &'a CycleGrowth, limit: Option<u64>) -> CycleJson<'a> {
        CycleJson {
            cycle: c,
            breakdown: c.breakdown.as_ref().map(breakdown_json),
            at_limit: c.at_limit.as_ref().map(at_limit_json),
            stuck: c.stuck.as_ref().map(|s| Summary {
                of: s,
                summary: stuck_words(s),
            }),
            memory_peak_anon: c.memory_peak_anon,
            episode: c.episode.as_ref(),
            other_episodes: &c.other_episodes,
            reading: c.reading.as_ref(),
            verdict: cycle_verdict(c, limit),
        }
    }
}

pub fn breakdown_json(b: &MemoryBreakdown) -> Summary<'_, MemoryBreakdown> {
    Summary {
        of: b,
        summary: breakdown_words(b),
    }
}

pub fn at_limit_json(a: &AtLimit) -> Summary<'_, AtLimit> {
    Summary {
        of: a,
        summary: at_limit_words(a),
    }
}

/// What B did after A's data: its figures, how B's cycle ended then, in words, and the summary.
#[derive(Serialize)]
pub struct AfterJson<'a> {
    #[serde(flatten)]
    pub of: &'a AfterBaseline,
    pub b_end: Option<String>,
    pub summary: String,
}

/// `compare --json`'s document: the comparison's figures, each regression with why it is worse
/// (an improvement with no words), what B did after A's data, the other pairs with their
/// verdicts, then which cycles were compared and the verdict.
#[derive(Serialize)]
pub struct ComparisonJson<'a> {
    #[serde(flatten)]
    pub of: &'a Comparison,
    pub regressions: Vec<Why<'a, Regression>>,
    pub improvements: Vec<Why<'a, Regression>>,
    pub after_a: Option<AfterJson<'a>>,
    pub other_pairs: Vec<Verdict<'a, PairVerdict>>,
    pub compared: String,
    pub verdict: String,
}

impl<'a> ComparisonJson<'a> {
    pub fn new(c: &'a Comparison) -> ComparisonJson<'a> {
        ComparisonJson {
            of: c,
            regressions: c
                .regressions
                .iter()
                .map(|r| Why {
                    of: r,
                    why: why_worse(r),
                })
                .collect(),
            improvements: c
                .improvements
                .iter()
                .map(|r| Why {
                    of: r,
                    why: String::new(),
                })
                .collect(),
            after_a: c.after_a.as_ref().map(|a| AfterJson {
                of: a,
                b_end: a.b_end.as_ref().map(b_end_words),
                summary: after_words(a),
            }),
            other_pairs: c
                .other_pairs
                .iter()
                .map(|o| Verdict {
                    of: o,
                    verdict: pair_verdict(&o.pair),
                })
                .collect(),
            compared: compared(c),
            verdict: verdict(c),
        }
    }
}

/// A Kubernetes triage: its figures, then every pod with the words of its containers.
#[derive(Serialize)]
pub struct TriageJson<'a> {
    #[serde(flatten)]
    pub of: &'a TriageReport,
    pub pods: Vec<PodJson<'a>>,
}

impl<'a> TriageJson<'a> {
    pub fn new(report: &'a TriageReport) -> TriageJson<'a> {
        TriageJson {
            of: report,
            pods: report.pods.iter().map(PodJson::new).collect(),
        }
    }
}

#[derive(Serialize)]
pub struct PodJson<'a> {
    #[serde(flatten)]
    pub of: &'a PodTriage,
    pub containers: Vec<ContainerJson<'a>>,
}

impl<'a> PodJson<'a> {
    pub fn new(pod: &'a PodTriage) -> PodJson<'a> {
        PodJson {
            of: pod,
            containers: pod
                .containers
                .iter()
                .map(|c| ContainerJson::new(c, &pod.qos_class))
                .collect(),
        }
    }
}

/// One container: its state, then each finding with what it means, then the verdict.
#[derive(Serialize)]
pub struct ContainerJson<'a> {
    #[serde(flatten)]
    pub of: &'a ContainerTriage,
    pub termination: Option<Meaning<'a, Termination>>,
    pub replicas: Option<Meaning<'a, ReplicaFinding>>,
    pub probes: Option<Meaning<'a, ProbeFinding>>,
    pub memory: Meaning<'a, MemoryFinding>,
    pub cpu: Meaning<'a, CpuFinding, Option<String>>,
    pub verdict: Summary<'a, crate::analyse::triage::Verdict>,
}

impl<'a> ContainerJson<'a> {
    pub fn new(c: &'a ContainerTriage, qos_class: &str) -> ContainerJson<'a> {
        let words = container_words(c, qos_class);
        ContainerJson {
            of: c,
            termination: c.termination.as_ref().zip(words.termination).map(meaning),
            replicas: c.replicas.as_ref().zip(words.replicas).map(meaning),
            probes: c.probes.as_ref().zip(words.probes).map(meaning),
            memory: Meaning {
                of: &c.memory,
                meaning: words.memory,
            },
            cpu: Meaning {
                of: &c.cpu,
                meaning: words.cpu,
            },
            verdict: Summary {
                of: &c.verdict,
                summary: words.verdict,
            },
        }
    }
}

fn meaning<T>((of, meaning): (&T, String)) -> Meaning<'_, T> {
    Meaning { of, meaning }
}

/// Envoy's findings: the report's counts, then the heap with why its shares differ, the
/// growth, the workers and configuration with what they mean, and the verdict.
#[derive(Serialize)]
pub struct EnvoyJson<'a> {
    #[serde(flatten)]
    pub of: &'a EnvoyReport,
    pub heap: Option<Explained<'a, HeapShare>>,
    pub growth: Option<&'a EnvoyGrowth>,
    pub workers: Option<Meaning<'a, WorkerMultiplier>>,
    pub config: Option<Meaning<'a, ConfigVolume>>,
    pub connections: Option<u64>,
    pub heap_dump: &'a crate::model::envoy::HeapDumpState,
    pub verdict: Summary<'a, EnvoyVerdict>,
}

/// A result with its words under `explanation`.
#[derive(Serialize)]
pub struct Explained<'a, T> {
    #[serde(flatten)]
    pub of: &'a T,
    pub explanation: String,
}

impl<'a> EnvoyJson<'a> {
    pub fn new(r: &'a EnvoyReport) -> EnvoyJson<'a> {
        EnvoyJson {
            of: r,
            heap: r.heap.as_ref().map(|h| Explained {
                of: h,
                explanation: heap_explanation(h),
            }),
            growth: r.growth.as_ref(),
            workers: r.workers.as_ref().map(|w| Meaning {
                of: w,
                meaning: workers_meaning(w),
            }),
            config: r.config.as_ref().map(|c| Meaning {
                of: c,
                meaning: config_meaning(c),
            }),
            connections: r.connections,
            heap_dump: &r.heap_dump,
            verdict: Summary {
                of: &r.verdict,
                summary: verdict_words(r),
            },
        }
    }
}
