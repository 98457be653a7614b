//! The CPU backend: the reference (oracle). Exact encode/decode, f64 or f32 accumulation,
//! rayon for speed. Supports every op.

use super::{BackendError, Op, Support};
use crate::format::{qdq_slice, MxFormat, MxTensor, ScaleMode};
use crate::moe::{self, MoeLayer, MoeOptions, MoeOutput, RouterConfig, Routing};

#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl CpuBackend {
    pub fn adapter(&self) -> String {
        format!("{} threads (rayon)", rayon::current_num_threads())
    }

    /// `mxmoe bench`'s floor: the host's memory copy bandwidth over `bytes`, copied in 1 MiB
    /// chunks on every rayon thread: `warm` untimed copies, then `reps` timed ones, each as GB/s
    /// (read + write: twice the bytes over the time).
    pub fn copy_bandwidth(&self, bytes: usize, warm: usize, reps: usize) -> Vec<f64> {
        use rayon::prelude::*;
        const CHUNK: usize = 1 << 20;
        let src = vec![0x5Au8; bytes.max(CHUNK)];
        let mut dst = vec![0u8; src.len()];
        let mut copy = || {
            dst.par_chunks_mut(CHUNK)
                .zip(src.par_chunks(CHUNK))
                .for_each(|(d, s)| d.copy_from_slice(s));
        };
        for _ in 0..warm {
            copy();
        }
        (0..reps.max(1))
            .map(|_| {
                let t = std::time::Instant::now();
                copy();
                2.0 * src.len() as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9
            })
            .collect()
    }
    pub fn supports(&self, op: &Op) -> Support {
        match op {
            Op::Quantize { .. }
            | Op::Dequantize { .. }
            | Op::Qdq { .. }
            | Op::Route { .. }
            | Op::MoeForward { .. } => Support::Supported,
        }
    }
    pub fn quantize(
        &self,
        f: MxFormat,
        m: ScaleMode,
        x: &[f32],
        shape: &[usize],
    ) -> Result<MxTensor, BackendError> {
        Ok(MxTensor::quantize(f, m, x, shape)?)
    }
    pub fn dequantize(&self, t: &MxTensor) -> Result<Vec<f32>, BackendError> {
        Ok(t.dequantize())
    }
    pub fn qdq(
        &self,
        f: MxFormat,
        m: ScaleMode,
        x: &[f32],
        k: usize,
    ) -> Result<Vec<f32>, BackendError> {
        Ok(qdq_slice(f, m, x, k)?)
    }
    pub fn route(
        &self,
        cfg: &RouterConfig,
        logits: &[f32],
        e: usize,
        bias: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        Ok(moe::route(cfg, logits, e, bias)?)
    }
    pub fn moe(
        &self,
        layer: &MoeLayer,
        hidden: &[f32],
        logits: &[f32],
        opts: MoeOptions,
    ) -> Result<MoeOutput, BackendError> {
        Ok(moe::forward(layer, hidden, logits, opts)?)
    }
}
