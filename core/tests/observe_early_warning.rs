//! Early warning on an injected clock: a steady leak warns before the limit, a sawtooth
//! below the limit never does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memreuse_core::observe::{EarlyWarning, EarlyWarningConfig};

const LIMIT: u64 = 1 << 30;

fn config() -> EarlyWarningConfig {
    EarlyWarningConfig {
        window: Duration::from_secs(20),
        threshold: Duration::from_secs(60),
        interval: Duration::from_secs(1),
        min_samples: 5,
        cooldown: Duration::from_secs(30),
    }
}

#[test]
fn steady_leak_warns_before_the_limit() {
    let w = EarlyWarning::new(LIMIT, config());
    let fired = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&fired);
    w.on_warning(Arc::new(move |warning| {
        assert!(warning.reserved < warning.limit);
        assert!(warning.time_to_limit < Duration::from_secs(60));
        seen.fetch_add(1, Ordering::Relaxed);
    }));
    let t0 = Instant::now();
    // 8 MiB/s from 128 MiB: the limit is reached at t = 112 s.
    let mut first = None;
    for s in 0..112u64 {
        let reserved = (128 << 20) + s * (8 << 20);
        if w.sample(t0 + Duration::from_secs(s), reserved, reserved / 2)
            .is_some()
            && first.is_none()
        {
            first = Some(s);
        }
    }
    let first = first.expect("a warning before the limit");
    // Projected 60 s before: at t = 52 s (within sampling granularity).
    assert!((50..=54).contains(&first), "first warning at {first} s");
    assert_eq!(fired.load(Ordering::Relaxed), w.warnings());
    assert!(
        w.warnings() >= 2,
        "cooldown allows repeats: {}",
        w.warnings()
    );
}

#[test]
fn sawtooth_below_the_limit_stays_silent() {
    let w = EarlyWarning::new(LIMIT, config());
    let t0 = Instant::now();
    // 0.5 GiB +- 0.25 GiB, period 8 s, for 10 minutes.
    for s in 0..600u64 {
        let phase = s % 8;
        let reserved = (256 << 20) + phase * (64 << 20);
        assert!(
            w.sample(t0 + Duration::from_secs(s), reserved, reserved)
                .is_none(),
            "warned at {s} s"
        );
    }
    assert_eq!(w.warnings(), 0);
}

#[test]
fn out_of_order_samples_are_ignored_and_flat_usage_is_silent() {
    let w = EarlyWarning::new(LIMIT, config());
    let t0 = Instant::now() + Duration::from_secs(100);
    for s in 0..60u64 {
        assert!(
            w.sample(t0 + Duration::from_secs(s), 900 << 20, 0)
                .is_none()
        );
    }
    assert!(w.sample(t0, LIMIT, 0).is_none(), "older sample ignored");
}

#[test]
fn background_thread_samples_and_stops_on_drop() {
    let cfg = EarlyWarningConfig {
        window: Duration::from_millis(40),
        threshold: Duration::from_secs(3600),
        interval: Duration::from_millis(2),
        min_samples: 3,
        cooldown: Duration::from_secs(3600),
    };
    let w = EarlyWarning::new(LIMIT, cfg);
    let level = Arc::new(AtomicU64::new(0));
    let src = Arc::clone(&level);
    let handle = w
        .spawn(move || {
            let v = src.fetch_add(1 << 20, Ordering::Relaxed);
            (v, v)
        })
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.warnings() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(handle);
    assert_eq!(w.warnings(), 1, "a fast leak warns once per cooldown");
}
