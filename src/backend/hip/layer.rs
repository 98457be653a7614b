//! A layer resident on the device ([`HipLayer`]) and its upload (`HipBackend::prepare`): the
//! expert weights' codes and scales, the biases, the expert map and the router's correction
//! bias, uploaded once and read by every forward of the layer (`moe.rs`). MXFP4 codes go up in
//! the nv4 layout where every kernel that may read them decodes it (`choice/layout.rs`
//! `nv4_layout`; hip/nv4.h), rearranged once on the device.

use super::choice::{nv4_layout, GEMV2_OUT_ROWS, GEMV_OUT_ROWS};
use super::driver::DevBuf;
use super::real::{args, f32_bytes, unsupported, HipBackend};
use crate::backend::wgpu::route as wroute;
use crate::backend::{BackendError, Op, Support};
use crate::moe::{MoeConfig, MoeLayer};

/// A layer's weights on the device.
pub struct HipLayer {
    pub(super) config: MoeConfig,
    pub(super) correction_bias: bool,
    pub(super) w13: DevBuf,
    pub(super) s13: DevBuf,
    pub(super) w2: DevBuf,
    pub(super) s2: DevBuf,
    pub(super) bias13: Option<DevBuf>,
    pub(super) bias2: Option<DevBuf>,
    pub(super) map: Option<DevBuf>,
    pub(super) route_bias: Option<DevBuf>,
    pub(super) dummy: DevBuf,
    /// gemv2's per-column-block counters (hip/gemv.h gemv2_combine), zero between forwards.
    pub(super) counters: DevBuf,
    /// The MXFP4 codes are in the nv4 layout (hip/nv4.h; choice/layout.rs nv4_layout).
    pub(super) nv4: bool,
}

impl HipLayer {
    pub fn config(&self) -> &MoeConfig {
        &self.config
    }
    pub fn has_correction_bias(&self) -> bool {
        self.correction_bias
    }
}

impl HipBackend {
    /// Upload a layer's weights once.
    pub fn prepare(&self, layer: &MoeLayer) -> Result<HipLayer, BackendError> {
        layer.validate()?;
        let op = Op::moe_of(
            &layer.config,
            layer.weights.e_score_correction_bias.is_some(),
            false,
        );
        if let Support::Unsupported { reason } = self.supports(&op) {
            return Err(unsupported(&op, reason));
        }
        let _g = self.guard()?;
        let w = &layer.weights;
        let up = |d: &[u8]| self.dev.upload(d);
        let opt = |v: Option<&[f32]>| v.map(|b| self.dev.upload(f32_bytes(b))).transpose();
        let nv4 = nv4_layout(
            !self.dev.arch.starts_with("gfx"),
            layer.config.scheme.weight.spec().code_bits,
            self.v2.is_ok(),
        )?;
        // nv4: the code words rearranged in place once (hip/gemm_mma.h mx_nv4_repack).
        let codes = |d: &[u8]| -> Result<DevBuf, BackendError> {
            let b = up(d)?;
            if nv4 {
                let n = (d.len() / 4) as u64;
                self.launch(
                    "mx_nv4_repack",
                    (n.div_ceil(256) as u32, 1),
                    256,
                    &mut args!(b.ptr, n),
                )?;
            }
            Ok(b)
        };
        Ok(HipLayer {
            config: layer.config.clone(),
            correction_bias: w.e_score_correction_bias.is_some(),
            nv4,
            w13: codes(&w.w13.data)?,
            s13: up(&w.w13.scales)?,
            w2: codes(&w.w2.data)?,
            s2: up(&w.w2.scales)?,
            bias13: opt(w.w13_bias.as_deref())?,
            bias2: opt(w.w2_bias.as_deref())?,
            map: w
                .expert_map
                .as_deref()
                .map(|m| self.dev.upload(bytemuck::cast_slice(m)))
                .transpose()?,
            route_bias: opt(w
                .e_score_correction_bias
                .as_deref()
                .filter(|b| wroute::uses_bias(&layer.config.router, Some(b))))?,
            dummy: self.dev.alloc(16)?,
            counters: {
                let n = layer
                    .config
                    .hidden
                    .div_ceil(GEMV_OUT_ROWS.min(GEMV2_OUT_ROWS));
                let c = self.dev.alloc(n * 4)?;
                c.fill(0, n)?;
                c
            },
        })
    }
}
