//! Each heap publication placed at the moment it describes, by the runtime's own clock where
//! the source reads it (`proc:`: the GC count around each capture) and by the heap's GC goal
//! where it does not. The Go runtime publishes at a GC's mark termination the snapshot of the
//! mark termination before; placing a publication at its own capture time lags it a GC period,
//! which doubles as the heap does ([`place_publication`] says how each case is placed).
//! [`before_first_publication`] and [`after_unpublished`] deal with the captures a life makes
//! before its runtime published anything: they sum every allocation, garbage included.

use crate::model::capture::CaptureRecord;

/// Whether a capture was made before the runtime published any heap profile cycle: the
/// profile then sums every allocation since the process started, garbage included (the
/// runtime's rule when no cycle holds data), and nothing is yet "allocated but not published"
/// (`recent_space` 0). Allocations of cycle 0 are flushed at profile cycle 2, so this holds
/// until the second GC; known only where the source reads the runtime's clock (`proc:`).
pub fn before_first_publication(r: &CaptureRecord) -> bool {
    r.gc.is_some_and(|g| g.profile_cycle.unwrap_or(g.num_gc) < 2)
        && r.totals.get("recent_space").copied().unwrap_or(0) == 0
}

/// The moment GC `n` ran, by the runtime's clock: halfway between the last capture that read a
/// count below `n` and the first that read `n` or more. `captures` are (seconds, GC count) in
/// time order.
pub(super) fn gc_moment(captures: &[(f64, Option<u32>)], n: u32) -> Option<f64> {
    let first = captures
        .iter()
        .position(|(_, g)| g.is_some_and(|g| g >= n))?;
    let after = captures[first].0;
    let before = captures[..first]
        .iter()
        .rev()
        .find(|(_, g)| g.is_some_and(|g| g < n))
        .map_or(after, |b| b.0);
    Some((before + after) / 2.0)
}

/// The first publication after captures made before any ([`before_first_publication`]): it
/// describes GC `n − 1` (seen at count `n`), which ran while those captures were being made, so
/// it goes at that GC's moment, and the captures after that moment, which counted garbage as in
/// use, give way to it. `None` without a clock or when the capture is not such a one.
pub(super) fn after_unpublished(
    r: &CaptureRecord,
    was_unpublished: bool,
    captures: &[(f64, Option<u32>)],
) -> Option<f64> {
    if !was_unpublished || before_first_publication(r) {
        return None;
    }
    let n = r.gc?.num_gc;
    gc_moment(captures, n.checked_sub(1)?)
}

/// Heap-profile publications among time-ordered captures, each placed at the moment it
/// describes.
///
/// The Go runtime publishes heap-profile figures (in-use and cumulative allocated) at a GC's
/// mark termination, and what it publishes is the snapshot of the mark termination before
/// (runtime/mprof.go: "we wait until the next mark termination to publish the previous mark
/// termination's snapshot"). So a capture with the same figures as the one before is no new
/// data (byte-level duplicates are only part of those), and a new publication describes the
/// heap as of the previous publication, which was first seen shortly after its GC. Placing it
/// at its own capture time instead lags it by one GC period, and as a growing heap doubles its
/// GC goal, GCs come ever more rarely: the lag grows, fitted rates come out at half the truth,
/// the last seconds before an OOM kill look flat and their catch-up looks like a storm. The
/// first publication of a cycle describes an unknown earlier moment and is not placed.
///
/// That holds while at most one GC runs between two captures. A heap cannot grow past its GC
/// goal (twice the live heap at GOGC=100, at least 4 MiB) between two consecutive mark
/// terminations, so a publication far above the one before means GCs ran unseen: a load that
/// came at once after a quiet start, a rise faster than the captures. Then the one before
/// still held when the last capture that showed it was taken (no GC had run since), and is
/// placed there again (unless it is the cycle's first, never placed: a start-up's own load is
/// no growth); the new one describes a GC between that capture and its own, and is
/// placed halfway (nats-server flooded after 3 s idle read "grew 15.2 MiB/s from 0.0 s" for a
/// rise of 46 MiB between the captures at 3.0 and 3.5 s).
///
/// Only `runtime.GC()` publishes the snapshot of the cycle it just finished: captures made
/// with `?gc=1` (`collect --gc`) are current and keep their own time.
///
/// Where the source reads the runtime's own GC count with each capture (`proc:`), nothing is
/// guessed: a publication seen at GC count `n` describes mark termination `n − 1`; GCs ran
/// unseen exactly when the count rose by two or more since the publication before; and when
/// one GC ran, that GC is placed between the last capture before it and the first after it.
pub(super) fn place_publication<T: PartialEq + Clone>(
    published: &mut Option<Publication<T>>,
    (figures, inuse): (&T, fn(&T) -> f64),
    t: f64,
    before: Option<Sighting>,
    clock: Option<u32>,
    forced_gc: bool,
) -> Option<Placed<T>> {
    if !forced_gc {
        // The same figures are the same publication, unless the clock says a GC published
        // since: a site that allocated nothing the profile sampled between two mark
        // terminations publishes the same figures twice, and the second describes the later one.
        let same_gc = |p: &Publication<T>| match (p.num_gc, clock) {
            (Some(was), Some(now)) => was == now,
            _ => true,
        };
        if let Some(p) = published
            .as_mut()
            .filter(|p| p.figures == *figures && same_gc(p))
        {
            p.last = p.last.max(t);
            return None;
        }
    }
    let placed = match published.take() {
        _ if forced_gc => Some(Placed { at: t, again: None }),
        None => None,
        Some(p) => {
            // The last capture that still showed it: no GC had published since.
            let last = before.map_or(p.last, |b| b.at.max(p.last)).min(t);
            let clocked = p.num_gc.is_some() && clock.is_some();
            let unseen = match (p.num_gc, clock) {
                (Some(was), Some(now)) => now >= was.saturating_add(2),
                _ => gcs_unseen(inuse(&p.figures), inuse(figures)),
            };
            // By the clock: the capture before this one, when it read a lower count.
            let counted = before.and_then(|b| Some((b.at, b.num_gc?))).zip(clock);
            if unseen {
                match counted {
                    // It describes GC `now − 1`, one of the GCs between that capture and
                    // this one, which are spread evenly over the gap; the one before stays
                    // at its own GC (the heap went on after it, and nothing says how).
                    Some(((b_at, was), now)) if was < now => Some(Placed {
                        at: spread((b_at, was), (t, now), now - 1),
                        again: None,
                    }),
                    _ => {
                        // A cycle's first publication stays unplaced (its moment is unknown).
                        let again =
                            p.at.is_some_and(|at| last > at && !clocked)
                                .then_some((last, p.figures));
                        Some(Placed {
                            at: (last + t) / 2.0,
                            again,
                        })
                    }
                }
            } else {
                // The GC that published the one before: first seen at `p.first`, and after
                // the capture before it when the clock says that capture preceded it (the
                // last of the GCs between them, when more than one ran there).
                let at = match (p.gc_after, p.num_gc) {
                    (Some(after), Some(seen)) => spread(after, (p.first, seen), seen),
                    _ => p.first,
                };
                Some(Placed { at, again: None })
            }
        }
    };
    let gc_after = before
        .and_then(|b| Some((b.at, b.num_gc?)))
        .filter(|&(_, was)| clock.is_some_and(|now| was < now));
    *published = Some(Publication {
        figures: figures.clone(),
        first: t,
        last: t,
        at: placed.as_ref().map(|p| p.at),
        num_gc: clock,
        gc_after,
    });
    placed
}

/// A capture before the one being placed: when, and the runtime's GC count it read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sighting {
    pub(super) at: f64,
    pub(super) num_gc: Option<u32>,
}

/// The newest heap publication of a cycle: its figures, when it was first and last seen, and
/// where it was placed.
pub(super) struct Publication<T> {
    pub(super) figures: T,
    pub(super) first: f64,
    pub(super) last: f64,
    pub(super) at: Option<f64>,
    /// The runtime's GC count when it was first seen, where the source reads it.
    pub(super) num_gc: Option<u32>,
    /// The last capture known to come before the GC that published it (a lower GC count):
    /// when, and the count it read.
    pub(super) gc_after: Option<(f64, u32)>,
}

/// The moment of GC `n`, one of the GCs that ran between a capture that read count `a` at
/// `t_a` and one that read `b` at `t_b` (`a < n <= b`): the GCs between are spread evenly over
/// the gap, so one GC goes halfway and two that ran unseen go at a third and two thirds (a
/// short life published at counts 2, 4 and 5 had both publications put at one moment, a rise
/// in no time that no reading could take).
pub(super) fn spread((t_a, a): (f64, u32), (t_b, b): (f64, u32), n: u32) -> f64 {
    let steps = f64::from(b.saturating_sub(a)) + 1.0;
    let k = f64::from(n.saturating_sub(a).min(b.saturating_sub(a)));
    t_a + (t_b - t_a) * k / steps
}

/// Where a publication goes, and the one before it placed again at its last sighting.
pub(super) struct Placed<T> {
    pub(super) at: f64,
    pub(super) again: Option<(f64, T)>,
}

/// Captures made before the first publication are figures of the heap only when the first
/// GC found at least this share of what had been allocated still in use.
pub(super) const LIVE_SHARE: f64 = 0.5;

/// The smallest GC goal the runtime sets (runtime/mgcpacer.go: 4 MiB at GOGC=100).
pub(super) const MIN_HEAP_GOAL: f64 = 4.0 * 1024.0 * 1024.0;

/// Whether in-use bytes going from `before` to `after` between two publications needs GCs
/// that were not seen: more than a quarter above the goal `before` sets (twice it, at least
/// [`MIN_HEAP_GOAL`]). At a GOGC above 100, or under GOMEMLIMIT alone, the goal is further and
/// a rise within it is taken for unseen GCs: the figure is then placed half an interval late.
pub(super) fn gcs_unseen(before: f64, after: f64) -> bool {
    after > 1.25 * (2.0 * before).max(MIN_HEAP_GOAL)
}
