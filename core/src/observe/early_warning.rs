//! Early warning: projects when reserved memory reaches the limit from its recent growth
//! rate, and calls back before it does (e.g. to lower the batch size).
//!
//! [`EarlyWarning::sample`] is a pure step function of an injected clock, so tests drive it
//! without sleeping; [`EarlyWarning::spawn`] samples on a background thread.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::allocator::CachingAllocator;
use crate::backend::Backend;
use crate::error::BackendError;

/// Tunables.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EarlyWarningConfig {
    /// Growth is estimated over the samples of this window (least squares).
    pub window: Duration,
    /// Warn when the projected time to the limit falls under this.
    pub threshold: Duration,
    /// Sampling interval of the background thread.
    pub interval: Duration,
    /// Samples needed before projecting (they must also span 90% of the window, so that the
    /// rising edge of a sawtooth is not mistaken for a trend).
    pub min_samples: usize,
    /// At most one warning per cooldown.
    pub cooldown: Duration,
}

impl Default for EarlyWarningConfig {
    fn default() -> Self {
        EarlyWarningConfig {
            window: Duration::from_secs(60),
            threshold: Duration::from_secs(300),
            interval: Duration::from_secs(1),
            min_samples: 5,
            cooldown: Duration::from_secs(60),
        }
    }
}

/// What callbacks receive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GrowthWarning {
    /// Reserved bytes at the sample that fired.
    pub reserved: u64,
    /// Allocated bytes at that sample.
    pub allocated: u64,
    /// The limit.
    pub limit: u64,
    /// Estimated growth of reserved bytes, per second.
    pub bytes_per_sec: f64,
    /// Projected time until reserved bytes reach the limit.
    pub time_to_limit: Duration,
}

/// A warning callback.
pub type WarningCallback = dyn Fn(&GrowthWarning) + Send + Sync;

struct WatchState {
    samples: VecDeque<(Instant, u64)>,
    last_warning: Option<Instant>,
}

struct Inner {
    config: EarlyWarningConfig,
    limit: u64,
    state: Mutex<WatchState>,
    callbacks: Mutex<Vec<Arc<WarningCallback>>>,
    warnings: AtomicU64,
}

/// The watcher. Clones share samples, callbacks and the warning count.
#[derive(Clone)]
pub struct EarlyWarning {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EarlyWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EarlyWarning")
            .field("limit", &self.inner.limit)
            .field("config", &self.inner.config)
            .field("warnings", &self.warnings())
            .finish_non_exhaustive()
    }
}

impl EarlyWarning {
    /// A watcher for reserved bytes against `limit`.
    pub fn new(limit: u64, config: EarlyWarningConfig) -> Self {
        EarlyWarning {
            inner: Arc::new(Inner {
                config,
                limit,
                state: Mutex::new(WatchState {
                    samples: VecDeque::new(),
                    last_warning: None,
                }),
                callbacks: Mutex::new(Vec::new()),
                warnings: AtomicU64::new(0),
            }),
        }
    }

    /// A watcher whose limit is `allocator`'s: the per-process limit
    /// (`per_process_memory_fraction` x device total) if set, else the device capacity.
    pub fn for_allocator<B: Backend>(
        allocator: &CachingAllocator<B>,
        config: EarlyWarningConfig,
    ) -> Result<Self, BackendError> {
        let total = allocator.backend().memory_info()?.total;
        let limit = match allocator.config().per_process_memory_fraction {
            Some(f) if f > 0.0 && f < 1.0 => (total as f64 * f) as u64,
            _ => total,
        };
        Ok(Self::new(limit, config))
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// The configuration.
    pub fn config(&self) -> EarlyWarningConfig {
        self.inner.config
    }

    /// Registers a callback, called (on the sampling thread, without internal locks) at
    /// every warning.
    pub fn on_warning(&self, cb: Arc<WarningCallback>) {
        self.inner.callbacks.lock().push(cb);
    }

    /// Warnings fired so far.
    pub fn warnings(&self) -> u64 {
        self.inner.warnings.load(Ordering::Relaxed)
    }

    /// Records a sample taken at `now` and fires the callbacks if the projected time to the
    /// limit is under the threshold (at most once per cooldown). Samples must come in time
    /// order; an older one is ignored.
    pub fn sample(&self, now: Instant, reserved: u64, allocated: u64) -> Option<GrowthWarning> {
        let cfg = self.inner.config;
        let limit = self.inner.limit;
        let warning = {
            let mut st = self.inner.state.lock();
            if st.samples.back().is_some_and(|&(t, _)| t > now) {
                return None;
            }
            st.samples.push_back((now, reserved));
            while st
                .samples
                .front()
                .is_some_and(|&(t, _)| now.duration_since(t) > cfg.window)
            {
                st.samples.pop_front();
            }
            if st
                .last_warning
                .is_some_and(|t| now.duration_since(t) < cfg.cooldown)
            {
                return None;
            }
            let span = st
                .samples
                .front()
                .map_or(Duration::ZERO, |&(t, _)| now.duration_since(t));
            if span < cfg.window.mul_f64(0.9) {
                return None;
            }
            let rate = growth_rate(&st.samples, cfg.min_samples)?;
            let time_to_limit = if reserved >= limit {
                Duration::ZERO
            } else if rate > 0.0 {
                Duration::try_from_secs_f64((limit - reserved) as f64 / rate)
                    .unwrap_or(Duration::MAX)
            } else {
                return None;
            };
            if time_to_limit >= cfg.threshold {
                return None;
            }
            st.last_warning = Some(now);
            GrowthWarning {
                reserved,
                allocated,
                limit,
                bytes_per_sec: rate,
                time_to_limit,
            }
        };
        self.inner.warnings.fetch_add(1, Ordering::Relaxed);
        let callbacks: Vec<_> = self.inner.callbacks.lock().clone();
        for cb in callbacks {
            cb(&warning);
        }
        Some(warning)
    }

    /// Samples `source()` (reserved, allocated) every `interval` on a background thread
    /// until the returned handle is dropped.
    pub fn spawn<F>(&self, source: F) -> std::io::Result<WatcherThread>
    where
        F: Fn() -> (u64, u64) + Send + 'static,
    {
        let me = self.clone();
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let interval = self.inner.config.interval;
        let handle = std::thread::Builder::new()
            .name("memreuse-early-warning".to_owned())
            .spawn(move || {
                let (lock, cv) = &*flag;
                let mut stopped = lock.lock();
                while !*stopped {
                    let (reserved, allocated) = source();
                    me.sample(Instant::now(), reserved, allocated);
                    cv.wait_for(&mut stopped, interval);
                }
            })?;
        Ok(WatcherThread {
            stop,
            handle: Some(handle),
        })
    }

    /// [`EarlyWarning::spawn`] over `allocator`'s reserved and allocated bytes.
    pub fn watch_allocator<B>(
        &self,
        allocator: Arc<CachingAllocator<B>>,
    ) -> std::io::Result<WatcherThread>
    where
        B: Backend + Send + Sync + 'static,
    {
        self.spawn(move || {
            let s = allocator.stats();
            (s.reserved_bytes.current, s.allocated_bytes.current)
        })
    }
}

/// Least-squares slope (bytes per second) of the samples; `None` with fewer than
/// `min_samples` (at least 2) or no time spread.
fn growth_rate(samples: &VecDeque<(Instant, u64)>, min_samples: usize) -> Option<f64> {
    if samples.len() < min_samples.max(2) {
        return None;
    }
    let t0 = samples.front()?.0;
    let n = samples.len() as f64;
    let xs = samples
        .iter()
        .map(|&(t, y)| (t.duration_since(t0).as_secs_f64(), y as f64));
    let (sx, sy) = xs.clone().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = xs.fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    (den > 0.0).then(|| num / den)
}

/// The background sampler; stops (and joins) when dropped.
#[derive(Debug)]
pub struct WatcherThread {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for WatcherThread {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
