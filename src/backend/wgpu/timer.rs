//! GPU timestamps around compute passes ([`Timer`], TIMESTAMP_QUERY) for benchmarks and
//! per-pass times: the query set, the pass labels, and resolved ticks turned into
//! milliseconds. [`Context::timer`] creates one where the device has the feature;
//! [`Context::resolve_buffer`] takes the buffer they are resolved into from the pool of
//! buffers.rs.

use super::context::Context;

/// GPU timestamps around compute passes (TIMESTAMP_QUERY), for benchmarks.
pub struct Timer {
    set: wgpu::QuerySet,
    labels: Vec<String>,
    cap: u32,
}

impl Timer {
    /// Timestamp writes for the next pass (None once the set is full).
    pub fn writes(&mut self, label: &str) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let i = 2 * self.labels.len() as u32;
        if i + 2 > self.cap {
            return None;
        }
        self.labels.push(label.to_string());
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        })
    }

    /// Bytes the resolved timestamps take.
    pub fn bytes(&self) -> u64 {
        (2 * self.labels.len() as u64).max(1) * 8
    }

    /// Resolve the written timestamps into `buf` (QUERY_RESOLVE usage).
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder, buf: &wgpu::Buffer) {
        if !self.labels.is_empty() {
            enc.resolve_query_set(&self.set, 0..2 * self.labels.len() as u32, buf, 0);
        }
    }

    /// Milliseconds from the first pass's beginning to the last pass's end (the passes and the
    /// gaps between them), from the resolved bytes; 0 without passes.
    pub fn span(&self, raw: &[u8], period_ns: f32) -> f64 {
        let t: Vec<u64> = bytemuck::pod_collect_to_vec(raw);
        match self.labels.len() {
            0 => 0.0,
            n => t[2 * n - 1].saturating_sub(t[0]) as f64 * period_ns as f64 * 1e-6,
        }
    }

    /// (label, milliseconds) per pass from the resolved bytes.
    pub fn durations(&self, raw: &[u8], period_ns: f32) -> Vec<(String, f64)> {
        let t: Vec<u64> = bytemuck::pod_collect_to_vec(raw);
        self.labels
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let d = t[2 * i + 1].saturating_sub(t[2 * i]);
                (l.clone(), d as f64 * period_ns as f64 * 1e-6)
            })
            .collect()
    }
}

impl Context {
    /// A timer for up to `passes` passes, when the device has TIMESTAMP_QUERY.
    pub fn timer(&self, passes: u32) -> Option<Timer> {
        if !self
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
        {
            return None;
        }
        let cap = 2 * passes.max(1);
        Some(Timer {
            set: self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("mxmoe timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: cap,
            }),
            labels: Vec::new(),
            cap,
        })
    }

    /// A buffer timestamps can be resolved into.
    pub fn resolve_buffer(&self, bytes: u64) -> wgpu::Buffer {
        self.take(
            bytes,
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        )
    }
}
