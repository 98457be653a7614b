//! The wgpu backend's bandwidth measurements (shaders/bandwidth_probe.wgsl): the device copy
//! that `mxmoe bench`'s floor divides by, and the streaming-read diagnostic (an ignored test).
//! An `impl WgpuBackend` block over the context's pipeline cache, buffer pool and timers.

use super::source::Shader;
use super::WgpuBackend;
use crate::backend::BackendError;

impl WgpuBackend {
    /// `mxmoe bench`'s floor: the adapter's copy bandwidth, measured by `copy` of
    /// shaders/bandwidth_probe.wgsl (16-byte loads and stores, grid-stride) over `bytes` (at most
    /// the adapter's storage-binding limit): `warm` untimed passes, then `reps` passes timed by
    /// timestamps, each as GB/s (read + write: twice the bytes copied over the time); with the
    /// bytes copied per pass. None where the device has no timestamp queries.
    pub fn copy_bandwidth(
        &self,
        bytes: u64,
        warm: u32,
        reps: u32,
    ) -> Result<Option<(Vec<f64>, u64)>, BackendError> {
        let ctx = &self.ctx;
        let Some(mut timer) = ctx.timer(reps.max(1)) else {
            return Ok(None);
        };
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        let pipe = ctx.pipeline(Shader::BandwidthProbe, "copy", &[])?;
        let limit = ctx
            .limits
            .max_storage_buffer_binding_size
            .min(ctx.limits.max_buffer_size);
        let bytes = (bytes.min(limit) / 16).max(1) * 16;
        let (src, dst) = (ctx.storage(bytes), ctx.storage(bytes));
        // The pool may round a buffer up: the kernel copies the smaller one whole.
        let copied = src.size().min(dst.size()) / 16 * 16;
        // Word i holds i, so that the check below sees a copy that moved or skipped words.
        let words: Vec<u32> = (0..(copied / 4) as u32).collect();
        ctx.queue
            .write_buffer(&src, 0, bytemuck::cast_slice(&words));
        drop(words);
        let bg = ctx.bind(&pipe, &[(0, &src), (2, &dst)]);
        let groups = 4096u32.min(ctx.limits.max_compute_workgroups_per_dimension);
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("copy_bandwidth"),
            });
        for i in 0..warm + reps.max(1) {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("copy"),
                timestamp_writes: if i >= warm {
                    timer.writes("copy")
                } else {
                    None
                },
            });
            pass.set_pipeline(&pipe);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(groups, 1, 1);
        }
        let rb = ctx.resolve_buffer(timer.bytes());
        timer.resolve(&mut enc, &rb);
        let head = 4096u64.min(copied);
        let r = ctx.submit_and_read(enc, &[(&rb, timer.bytes()), (&dst, head)])?;
        let got: &[u32] = bytemuck::cast_slice(&r[1][..head as usize]);
        if got.iter().enumerate().any(|(i, &w)| w != i as u32) {
            return Err(BackendError::Device(
                "copy bandwidth: the copy kernel's output differs from its input".into(),
            ));
        }
        let gbps: Vec<f64> = timer
            .durations(&r[0], ctx.queue.get_timestamp_period())
            .into_iter()
            .map(|(_, ms)| 2.0 * copied as f64 / (ms.max(1e-9) * 1e-3) / 1e9)
            .collect();
        Ok((!gbps.is_empty()).then_some((gbps, copied)))
    }

    /// Whether the adapter is a CPU (Mesa lavapipe, WARP, SwiftShader).
    pub fn is_cpu_adapter(&self) -> bool {
        self.ctx.info.adapter.device_type == "Cpu"
    }

    /// Diagnostic: GPU-timed streaming read (vec4<u32> loads, grid-stride) of a `bytes` buffer
    /// made like layer weights (`upload_owned`) and of a pooled storage buffer, then the gemv's
    /// read shape over the first (64-row groups of 1440-byte rows, 8 rows x 16-byte blocks per
    /// thread) without and with the FP4 table decode; `reps` passes each: [(label, GB/s)] per
    /// pass. Tells memory placement, access shape and decode cost apart when a kernel reads far
    /// below the adapter's bandwidth.
    pub fn bandwidth_probe(
        &self,
        bytes: u64,
        reps: u32,
    ) -> Result<Vec<(String, f64)>, BackendError> {
        let _g = self.ctx.op_lock.lock().unwrap_or_else(|p| p.into_inner());
        let ctx = &self.ctx;
        let pipe = |entry| ctx.pipeline(Shader::BandwidthProbe, entry, &[]);
        let (p, p_rows, p_lut) = (pipe("main")?, pipe("rows")?, pipe("rows_lut")?);
        let bytes = (bytes / 16).max(1) * 16;
        let owned = ctx.upload_owned("probe_owned", &vec![0x5Au8; bytes as usize]);
        let pooled = ctx.storage(bytes);
        ctx.queue
            .write_buffer(&pooled, 0, &vec![0xA5u8; bytes as usize]);
        let dst = ctx.storage(256);
        let mut timer = match ctx.timer(4 * reps) {
            Some(t) => t,
            None => return Ok(Vec::new()),
        };
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("probe"),
            });
        let wg_max = ctx.limits.max_compute_workgroups_per_dimension;
        let groups = 4096u32.min(wg_max);
        // Whole 64-row groups of 1440-byte rows: what the rows kernels read.
        let row_groups = ((bytes / 1440 / 64) as u32).clamp(1, wg_max);
        let row_bytes = row_groups as u64 * 64 * 1440;
        let runs = [
            ("stream/upload_owned", &p, &owned, groups),
            ("stream/pooled", &p, &pooled, groups),
            ("rows/upload_owned", &p_rows, &owned, row_groups),
            ("rows_lut/upload_owned", &p_lut, &owned, row_groups),
        ];
        for (name, pl, b, n) in runs {
            let bg = ctx.bind(pl, &[(0, b), (1, &dst)]);
            for _ in 0..reps {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(name),
                    timestamp_writes: timer.writes(name),
                });
                pass.set_pipeline(pl);
                pass.set_bind_group(0, &bg, &[]);
                pass.dispatch_workgroups(n, 1, 1);
            }
        }
        let rb = ctx.resolve_buffer(timer.bytes());
        timer.resolve(&mut enc, &rb);
        let r = ctx.submit_and_read(enc, &[(&rb, timer.bytes())])?;
        let t = timer.durations(&r[0], ctx.queue.get_timestamp_period());
        Ok(t.into_iter()
            .map(|(l, ms)| {
                let b = if l.starts_with("rows") {
                    row_bytes
                } else {
                    bytes
                };
                (l, b as f64 / (ms.max(1e-9) * 1e-3) / 1e9)
            })
            .collect())
    }
}
