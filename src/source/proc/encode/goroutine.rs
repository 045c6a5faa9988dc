//! The goroutine profile as `printCountProfile` writes `/debug/pprof/goroutine`, with labels for
//! where each goroutine was created, the function it started in, and whether it was running.

use std::collections::HashMap;
use std::io::Write as _;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message as _;

use super::tables::{PcMap, Tables};
use super::{ExeMapping, Symbols};
use crate::decode::pb;

/// Writes one target's goroutine profiles as `runtime/pprof`'s `printCountProfile` writes
/// `/debug/pprof/goroutine`: sample type and period `goroutine/count`, one sample per stack
/// with its count. Each sample also carries where its goroutines were created (label
/// `created_by`: the function and file:line of the `go` statement) and the function they
/// started in (`go_func`), and goroutines that were running when read are a sample of their
/// own labelled `state: running`, whose one location is that function: their real stack was
/// on a thread, not in memory.
pub struct GoroutineEncoder {
    tables: Tables,
    sample_type: Vec<pb::ValueType>,
    period_type: Option<pb::ValueType>,
    created_key: i64,
    func_key: i64,
    state_key: i64,
    running: i64,
    /// `gopc` → the string id of its `created_by` label (0: none).
    sites: PcMap<i64>,
    /// `startpc` → the string id of its `go_func` label (0: none).
    funcs: PcMap<i64>,
}

/// (stack, created_by, go_func, running): what one goroutine sample stands for.
type GoroutineKey = (Vec<u64>, i64, i64, bool);

impl GoroutineEncoder {
    pub fn new(mappings: &[ExeMapping]) -> GoroutineEncoder {
        let mut t = Tables::with_mappings(mappings);
        let vt = pb::ValueType {
            r#type: t.intern("goroutine"),
            unit: t.intern("count"),
        };
        let created_key = t.intern("created_by");
        let func_key = t.intern("go_func");
        let state_key = t.intern("state");
        let running = t.intern("running");
        GoroutineEncoder {
            tables: t,
            sample_type: vec![vt],
            period_type: Some(vt),
            created_key,
            func_key,
            state_key,
            running,
            sites: PcMap::default(),
            funcs: PcMap::default(),
        }
    }

    /// The `created_by` label of a goroutine, as a `debug=2` dump prints `created by`: none
    /// for the main goroutine (goid 1) nor for a site in an unexported runtime function
    /// (`showframe` hides those).
    fn site(&mut self, syms: &Symbols, goid: u64, gopc: u64) -> i64 {
        if goid == 1 {
            return 0;
        }
        if let Some(&id) = self.sites.get(&gopc) {
            return id;
        }
        let id = match syms.table.creation_site(gopc.wrapping_sub(syms.bias)) {
            Some((name, _, _))
                if name
                    .strip_prefix("runtime.")
                    .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_uppercase())) =>
            {
                0
            }
            Some((name, file, line)) => self.tables.intern(&format!("{name} {file}:{line}")),
            None => 0,
        };
        self.sites.insert(gopc, id);
        id
    }

    fn func(&mut self, syms: &Symbols, startpc: u64) -> i64 {
        if let Some(&id) = self.funcs.get(&startpc) {
            return id;
        }
        let name = syms
            .table
            .find_func(startpc.wrapping_sub(syms.bias))
            .and_then(|f| syms.table.func_name(f).map(str::to_string));
        let id = name.map_or(0, |n| self.tables.intern(&n));
        self.funcs.insert(startpc, id);
        id
    }

    /// The gzipped goroutine profile of one walk.
    pub fn goroutine_profile_gz(
        &mut self,
        gs: &crate::source::proc::goroutines::Goroutines,
        syms: &Symbols,
        time_nanos: i64,
    ) -> Vec<u8> {
        use crate::source::proc::goroutines::GState;
        let mut counts: HashMap<GoroutineKey, i64> = HashMap::new();
        for g in &gs.goroutines {
            let running = g.state == GState::Running;
            let stack = if running {
                vec![g.startpc.wrapping_add(1)]
            } else {
                gs.stack(g).to_vec()
            };
            let key = (
                stack,
                self.site(syms, g.goid, g.gopc),
                self.func(syms, g.startpc),
                running,
            );
            *counts.entry(key).or_default() += 1;
        }
        // printCountProfile's order: most goroutines first.
        let mut samples: Vec<(GoroutineKey, i64)> = counts.into_iter().collect();
        samples.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut raw = Vec::new();
        let mut locs = Vec::new();
        for ((stack, site, func, running), count) in samples {
            let mut stack = stack;
            syms.table.expand_final_inline_biased(&mut stack, syms.bias);
            locs.clear();
            self.tables.locations_for(syms, &stack, &mut locs);
            let mut label = vec![];
            for (key, value) in [
                (self.created_key, site),
                (self.func_key, func),
                (self.state_key, if running { self.running } else { 0 }),
            ] {
                if value != 0 {
                    label.push(pb::Label {
                        key,
                        str: value,
                        num: 0,
                        num_unit: 0,
                    });
                }
            }
            let sample = pb::Sample {
                location_id: locs.clone(),
                value: vec![count],
                label,
            };
            prost::encoding::message::encode(2, &sample, &mut raw);
        }
        let head = pb::Profile {
            sample_type: self.sample_type.clone(),
            time_nanos,
            period_type: self.period_type,
            period: 1,
            ..Default::default()
        };
        head.encode(&mut raw)
            .expect("a Vec grows to hold any message");
        raw.extend_from_slice(&self.tables.encoded);
        let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 3 + 64), Compression::fast());
        gz.write_all(&raw).expect("writing to a Vec cannot fail");
        gz.finish().expect("writing to a Vec cannot fail")
    }
}
