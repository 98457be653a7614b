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
