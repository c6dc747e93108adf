//! The per-session rate limit: at most `calls` per sliding `window`.
//!
//! Invariant: exact under concurrency. Every attempt takes the lock, and an
//! admitted attempt records its time before the lock is released, so no two
//! callers can both take the last slot. Denied, failed and timed-out calls
//! count: the caller asks before doing anything else.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A sliding-window limiter.
#[derive(Debug)]
pub struct RateLimiter {
    calls: u64,
    window: Duration,
    times: Mutex<VecDeque<Instant>>,
}

impl RateLimiter {
    /// At most `calls` per `window`; `calls` = 0 disables the limit.
    pub fn new(calls: u64, window: Duration) -> Self {
        RateLimiter {
            calls,
            window,
            times: Mutex::new(VecDeque::new()),
        }
    }

    /// Admits one call now, or says how long until one would be admitted.
    pub fn admit(&self) -> Result<(), Duration> {
        self.admit_at(Instant::now())
    }

    /// [`RateLimiter::admit`] at a given instant (for tests).
    pub fn admit_at(&self, now: Instant) -> Result<(), Duration> {
        if self.calls == 0 {
            return Ok(());
        }
        let mut times = self.times.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(&first) = times.front() {
            if now.saturating_duration_since(first) >= self.window {
                times.pop_front();
            } else {
                break;
            }
        }
        if (times.len() as u64) < self.calls {
            times.push_back(now);
            return Ok(());
        }
        let oldest = times.front().copied().unwrap_or(now);
        Err(self
            .window
            .saturating_sub(now.saturating_duration_since(oldest)))
    }

    /// The configured calls per window (0: off).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// The configured window.
    pub fn window(&self) -> Duration {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slides_and_says_when_to_retry() {
        let r = RateLimiter::new(2, Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(r.admit_at(t0), Ok(()));
        assert_eq!(r.admit_at(t0 + Duration::from_secs(4)), Ok(()));
        assert_eq!(
            r.admit_at(t0 + Duration::from_secs(5)),
            Err(Duration::from_secs(5))
        );
        // The first call leaves the window at t0 + 10.
        assert_eq!(r.admit_at(t0 + Duration::from_secs(10)), Ok(()));
        assert_eq!(
            r.admit_at(t0 + Duration::from_secs(11)),
            Err(Duration::from_secs(3))
        );
        let off = RateLimiter::new(0, Duration::from_secs(1));
        for _ in 0..1000 {
            assert_eq!(off.admit_at(t0), Ok(()));
        }
    }

    #[test]
    fn exact_under_concurrency() {
        let r = std::sync::Arc::new(RateLimiter::new(100, Duration::from_secs(3600)));
        let admitted: u64 = (0..8)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || (0..50).filter(|_| r.admit().is_ok()).count() as u64)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap_or(0))
            .sum();
        assert_eq!(admitted, 100);
    }
}
