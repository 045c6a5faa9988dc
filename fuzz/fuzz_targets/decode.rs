//! Arbitrary bytes through the decoder: it must return an error or a profile whose every
//! reference holds and whose sums fit in i64, so that aggregating it at every granularity
//! neither panics nor overflows (overflow checks are on in `cargo fuzz` builds).

#![no_main]

use heapwatch::decode::{self, DecodeLimits};
use heapwatch::model::aggregate::{self, Granularity};
use libfuzzer_sys::fuzz_target;

/// Small enough that a bomb costs milliseconds, large enough for real captures as seeds.
const LIMITS: DecodeLimits = DecodeLimits {
    max_decompressed: 8 << 20,
};

/// Each aggregation walks every frame; a profile declaring thousands of sample types would
/// make one run quadratic without reaching any code the first few types do not.
const MAX_TYPES: usize = 16;

fuzz_target!(|data: &[u8]| {
    // The store hashes whatever bytes a target served, valid or not.
    let _ = decode::content_hash(data);
    let Ok(profile) = decode::decode(data, &LIMITS) else {
        return;
    };
    let totals = profile.totals();
    for (index, &total) in totals.iter().enumerate().take(MAX_TYPES) {
        assert_eq!(profile.total(index), total);
        // Samples with an empty stack count in the total but have no leaf to be flat in.
        let stackless: i64 = profile
            .samples
            .iter()
            .enumerate()
            .filter(|(_, s)| s.stack_len == 0)
            .map(|(i, _)| profile.sample_values(i)[index])
            .sum();
        for granularity in [Granularity::Function, Granularity::File, Granularity::Line] {
            let table = aggregate::sites(&profile, index, granularity);
            assert_eq!(table.total, total);
            let flat: i64 = table.sites.iter().map(|s| s.flat).sum();
            assert_eq!(flat + stackless, table.total, "{granularity:?}");
            let stacks = aggregate::stacks(&profile, index, granularity);
            let stacked: i64 = stacks.iter().map(|s| s.value).sum();
            assert_eq!(stacked, table.total, "{granularity:?}");
        }
    }
});
