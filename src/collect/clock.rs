//! Time, injected: the real clock sleeps, the fake one jumps, so pacing, burst and restart
//! logic is tested without sleeping and without luck.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync {
    /// Monotonic time since the clock was made.
    fn now(&self) -> Duration;
    /// Wall-clock time, unix milliseconds.
    fn unix_ms(&self) -> i64;
    /// Sleeps until `deadline` (monotonic) or until `stop` is set, whichever comes first.
    fn sleep_until(&self, deadline: Duration, stop: &AtomicBool);
}

pub struct SystemClock {
    start: Instant,
    start_unix_ms: i64,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        let start_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
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

    fn sleep_until(&self, deadline: Duration, stop: &AtomicBool) {
        // Short slices so Ctrl-C is answered within 50 ms even during a long interval.
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let now = self.now();
            if now >= deadline {
                return;
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
        }
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

    fn sleep_until(&self, deadline: Duration, _stop: &AtomicBool) {
        let mut now = self.now.lock().expect("fake clock");
        if *now < deadline {
            *now = deadline;
        }
    }
}
