//! Time, injected: the real clock sleeps on tokio's timer (so tests may pause it), the fake
//! one jumps, so pacing, burst and restart logic is tested without sleeping and without luck.
//! Beside it, [`Stop`]: the signal that ends a collector, set from any thread.
//!
//! # Cancellation
//!
//! `Stop` is an `AtomicBool` and a `tokio::sync::Notify` behind an `Arc`: the Ctrl-C handler
//! calls `set()` (any thread), which wakes every `wait()`. Each sleep and each request is raced
//! against `stop.wait()` with `select!`: a native request is dropped at once (its connection
//! closes); a blocking fetch is abandoned on its thread (the collector ends, and the runtime is
//! not waited for). The attempt cut short is not recorded and takes no seq; the collector writes
//! its `stop` record and returns. The stop flag is not leaked, and `heapwatch run`'s supervisor
//! polls the same flag (`Stop::flag`).
//!
//! # Time
//!
//! `SystemClock` sleeps on tokio's timer and reads `tokio::time::Instant`, so a test may run the
//! real clock with tokio's paused time (`start_paused`); the injected `FakeClock` still jumps to
//! each deadline, and the pacing tests in `collect/tests.rs` run unchanged on it.
//!
//! # Pacing: `Nudge`
//!
//! A seam opened for `heapwatch watch`, unused by `collect` and `run`. A collector paced by a 10 s
//! baseline would sleep through most of a fast grower's life. A nudge makes its heap capture (or
//! its probe while the target is gone) due at once, at most once per burst interval. The memory
//! sampler nudges when a container's anonymous memory crosses the burst share of the limit or
//! rises by a twentieth of it in one sample (`OutsideMemory::nudge_permille`, zero unless asked);
//! the watch loop nudges when a new pid appears in a container, so a restart's first capture is
//! not a baseline away.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// A sleep in progress; dropping it cancels it.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

pub trait Clock: Send + Sync {
    /// Monotonic time since the clock was made.
    fn now(&self) -> Duration;
    /// Wall-clock time, unix milliseconds.
    fn unix_ms(&self) -> i64;
    /// Resolves at `deadline` (monotonic). The collector races it against its [`Stop`].
    fn sleep_until(&self, deadline: Duration) -> Sleep;
}

pub struct SystemClock {
    /// tokio's instant: the same as std's, unless a test paused tokio's time.
    start: Instant,
    start_unix_ms: i64,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        let start_unix_ms = crate::time::now_ms();
        SystemClock {
            start: Instant::now(),
            start_unix_ms,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn unix_ms(&self) -> i64 {
        self.start_unix_ms + self.start.elapsed().as_millis() as i64
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        Box::pin(tokio::time::sleep_until(self.start + deadline))
    }
}

/// A clock that only moves when told to (or when slept on).
pub struct FakeClock {
    now: Mutex<Duration>,
    start_unix_ms: i64,
}

impl FakeClock {
    pub fn new(start_unix_ms: i64) -> FakeClock {
        FakeClock {
            now: Mutex::new(Duration::ZERO),
            start_unix_ms,
        }
    }

    pub fn advance(&self, by: Duration) {
        *self.now.lock().expect("fake clock") += by;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Duration {
        *self.now.lock().expect("fake clock")
    }

    fn unix_ms(&self) -> i64 {
        self.start_unix_ms + self.now().as_millis() as i64
    }

    /// Jumps to the deadline at once.
    fn sleep_until(&self, deadline: Duration) -> Sleep {
        let mut now = self.now.lock().expect("fake clock");
        if *now < deadline {
            *now = deadline;
        }
        Box::pin(std::future::ready(()))
    }
}

/// Tells collectors to stop (Ctrl-C, or a run that cannot go on). Cloned into every task
/// and handler; [`Stop::set`] works from any thread, a signal handler's included, and wakes
/// whatever awaits [`Stop::wait`] at once: a sleep, or a request in flight.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<StopShared>);

#[derive(Debug, Default)]
struct StopShared {
    set: AtomicBool,
    wake: Notify,
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    pub fn set(&self) {
        self.0.set.store(true, Ordering::SeqCst);
        self.0.wake.notify_waiters();
    }

    pub fn is_set(&self) -> bool {
        self.0.set.load(Ordering::SeqCst)
    }

    /// The flag itself, for code that polls it (the supervisor of `heapwatch run`).
    pub fn flag(&self) -> &AtomicBool {
        &self.0.set
    }

    /// Resolves once the stop is set.
    pub async fn wait(&self) {
        loop {
            let woken = self.0.wake.notified();
            tokio::pin!(woken);
            // Registered before the flag is read, so a `set` in between is not missed.
            woken.as_mut().enable();
            if self.is_set() {
                return;
            }
            woken.await;
        }
    }
}

/// Asks a sleeping collector for a capture now rather than at its next due time: a new
/// process in its container, or its memory crossing into burst mode between two baseline
/// captures. Set from any thread; a nudge while the collector is busy is kept for its next
/// sleep.
#[derive(Debug, Clone, Default)]
pub struct Nudge(Arc<NudgeShared>);

#[derive(Debug, Default)]
struct NudgeShared {
    pending: AtomicBool,
    wake: Notify,
}

impl Nudge {
    pub fn new() -> Nudge {
        Nudge::default()
    }

    pub fn nudge(&self) {
        self.0.pending.store(true, Ordering::SeqCst);
        self.0.wake.notify_one();
    }

    /// Whether a nudge came since the last call.
    pub fn take(&self) -> bool {
        self.0.pending.swap(false, Ordering::SeqCst)
    }

    /// Resolves at the next nudge (at once for one that came while nobody waited).
    pub async fn wait(&self) {
        self.0.wake.notified().await;
    }
}
