//! `MXMOE_HIP_HOST_PROFILE=1`: where a MoE forward's host time goes (`moe.rs`), by phase.
//! wgpu's counterpart, with its own knob, is `wgpu/host_profile.rs`.

use std::sync::atomic::Ordering;

/// `MXMOE_HIP_HOST_PROFILE=1`: the host time of a forward by phase (upload, launches, waiting
/// for the GPU, copy back), printed to stderr for one forward in 64 (measurement aid).
pub(super) struct HostProfile {
    on: bool,
    last: std::cell::Cell<std::time::Instant>,
}

static PROFILE_COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl HostProfile {
    pub(super) fn start() -> Self {
        HostProfile {
            on: std::env::var("MXMOE_HIP_HOST_PROFILE").is_ok_and(|v| v == "1"),
            last: std::cell::Cell::new(std::time::Instant::now()),
        }
    }
    /// Milliseconds since the last lap.
    pub(super) fn lap(&self) -> f64 {
        if !self.on {
            return 0.0;
        }
        let now = std::time::Instant::now();
        let ms = (now - self.last.get()).as_secs_f64() * 1e3;
        self.last.set(now);
        ms
    }
    pub(super) fn report(&self, m: usize, t: [f64; 4]) {
        if self.on
            && PROFILE_COUNT
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(64)
        {
            eprintln!(
                "hip host profile, M = {m}: upload {:.3} ms, launches {:.3} ms, GPU wait {:.3} ms, \
                 copy back {:.3} ms",
                t[0], t[1], t[2], t[3]
            );
        }
    }
}
