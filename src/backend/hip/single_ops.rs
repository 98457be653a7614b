//! The ops that run on their own, one kernel each and waited for: quantize, dequantize and QDQ
//! (`mx_quantize`, `mx_dequantize`, `mx_qdq`: bit-exact, the WGSL kernels' integer port) and
//! routing (`mx_route`, or v6's warp kernels where the router allows: `choice/route.rs`
//! `route_op_kernel`). The MoE forward runs the same kernels within its own launch sequence
//! (`moe.rs`).

use super::choice::{route_op_kernel, route_variant, RouterShape};
use super::real::{args, f32_bytes, unsupported, HipBackend};
use crate::backend::wgpu::route as wroute;
use crate::backend::{ops, BackendError, Op, Support};
use crate::format::{FormatError, MxFormat, MxTensor, ScaleMode, BLOCK};
use crate::moe::{RouterConfig, Routing};

impl HipBackend {
    pub fn quantize(
        &self,
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        shape: &[usize],
    ) -> Result<MxTensor, BackendError> {
        ops::validate_quantize(x, shape)?;
        let _g = self.guard()?;
        let nb = x.len() / BLOCK;
        let cb = format.spec().code_bits as usize;
        let xin = self.dev.upload(f32_bytes(x))?;
        let codes = self.out(nb * cb * 4)?;
        let scales = self.out(nb)?;
        let (n, f, m) = (nb as u32, format.id(), mode.id());
        self.launch(
            "mx_quantize",
            (n.div_ceil(256).max(1), 1),
            256,
            &mut args!(xin.ptr, codes.ptr, scales.ptr, n, f, m),
        )?;
        self.dev.synchronize()?;
        let data = codes.read(nb * cb * 4)?;
        let sc = scales.read(nb)?;
        Ok(MxTensor::new(format, shape.to_vec(), data, sc)?)
    }

    pub fn dequantize(&self, t: &MxTensor) -> Result<Vec<f32>, BackendError> {
        ops::validate_dequantize(t)?;
        let _g = self.guard()?;
        let nb = t.numel() / BLOCK;
        let codes = self.dev.upload(&t.data)?;
        let scales = self.dev.upload(&t.scales)?;
        let out = self.out(nb * BLOCK * 4)?;
        let (n, f) = (nb as u32, t.format.id());
        self.launch(
            "mx_dequantize",
            ((nb * BLOCK).div_ceil(256).max(1) as u32, 1),
            256,
            &mut args!(codes.ptr, scales.ptr, out.ptr, n, f),
        )?;
        self.dev.synchronize()?;
        Ok(bytemuck::pod_collect_to_vec(&out.read(nb * BLOCK * 4)?))
    }

    pub fn qdq(
        &self,
        format: MxFormat,
        mode: ScaleMode,
        x: &[f32],
        k: usize,
    ) -> Result<Vec<f32>, BackendError> {
        ops::validate_qdq(x, k)?;
        if k == 0 || !k.is_multiple_of(BLOCK) {
            return Err(FormatError::NotBlockMultiple(k).into());
        }
        let _g = self.guard()?;
        let nb = x.len() / BLOCK;
        let xin = self.dev.upload(f32_bytes(x))?;
        let out = self.out(x.len() * 4)?;
        let (n, f, m) = (nb as u32, format.id(), mode.id());
        self.launch(
            "mx_qdq",
            (n.div_ceil(256).max(1), 1),
            256,
            &mut args!(xin.ptr, out.ptr, n, f, m),
        )?;
        self.dev.synchronize()?;
        Ok(bytemuck::pod_collect_to_vec(&out.read(x.len() * 4)?))
    }

    pub fn route(
        &self,
        cfg: &RouterConfig,
        logits: &[f32],
        n_experts: usize,
        bias: Option<&[f32]>,
    ) -> Result<Routing, BackendError> {
        let m = ops::validate_route(cfg, logits, n_experts, bias)?;
        let op = Op::route_of(cfg, n_experts, bias.is_some());
        if let Support::Unsupported { reason } = self.supports(&op) {
            return Err(unsupported(&op, reason));
        }
        let _g = self.guard()?;
        let k = cfg.top_k;
        let has_bias = wroute::uses_bias(cfg, bias);
        let p = wroute::params(cfg, m, n_experts, has_bias);
        let lb = self.dev.upload(f32_bytes(logits))?;
        let bb = match bias {
            Some(b) if has_bias => self.dev.upload(f32_bytes(b))?,
            _ => self.dev.alloc(4)?,
        };
        let ids = self.out(m * k * 4)?;
        let w = self.out(m * k * 4)?;
        let (kernel, threads, per_block) = route_op_kernel(route_variant()?, RouterShape::of(&p));
        self.launch(
            &kernel,
            ((m as u32).div_ceil(per_block), 1),
            threads,
            &mut args!(p, lb.ptr, bb.ptr, ids.ptr, w.ptr),
        )?;
        self.dev.synchronize()?;
        Ok(Routing {
            top_k: k,
            topk_ids: bytemuck::pod_collect_to_vec(&ids.read(m * k * 4)?),
            topk_weights: bytemuck::pod_collect_to_vec(&w.read(m * k * 4)?),
        })
    }
}
