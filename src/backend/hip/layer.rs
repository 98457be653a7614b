//! A layer resident on the device ([`HipLayer`]) and its upload (`HipBackend::prepare`): the
//! expert weights' codes and scales, the biases, the expert map and the router's correction
//! bias, uploaded once and read by every forward of the layer (`moe.rs`). MXFP4 codes go up in
//! the nv4 layout where every kernel that may read them decodes it (`choice/layout.rs`
//! `nv4_layout`; hip/nv4.h), rearranged once on the device.

use super::choice::{nv4_layout, nv4_rows, GEMV2_OUT_ROWS, GEMV_OUT_ROWS};
use super::driver::DevBuf;
use super::real::{args, f32_bytes, unsupported, HipBackend};
use crate::backend::wgpu::route as wroute;
use crate::backend::{BackendError, Op, Support};
use crate::format::{MxTensor, BLOCK};
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
    /// ... and their blocks in the rows order (hip/nv4.h `Nv4Rows`; choice/layout.rs nv4_rows).
    pub(super) nv4_rows: bool,
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
        let rows = nv4 && nv4_rows()?;
        // nv4: the code words rearranged in place once (hip/gemm_mma.h mx_nv4_repack); with
        // the rows order, copied with the scales into buffers of that order (mx_nv4_rows; the
        // stored copies are freed on return).
        let tensor = |t: &MxTensor| -> Result<(DevBuf, DevBuf), BackendError> {
            let (codes, scales) = (up(&t.data)?, up(&t.scales)?);
            if !nv4 {
                return Ok((codes, scales));
            }
            if !rows {
                let n = (t.data.len() / 4) as u64;
                self.launch(
                    "mx_nv4_repack",
                    (n.div_ceil(256) as u32, 1),
                    256,
                    &mut args!(codes.ptr, n),
                )?;
                return Ok((codes, scales));
            }
            let (experts, nrows, kblocks) = nv4_rows_shape(t)?;
            let blocks = experts * nrows.next_multiple_of(16) * kblocks.next_multiple_of(4);
            let (wd, sd) = (self.dev.alloc(16 * blocks)?, self.dev.alloc(blocks)?);
            let (e, r, k) = (experts as u32, nrows as u32, kblocks as u32);
            self.launch(
                "mx_nv4_rows",
                (blocks.div_ceil(256) as u32, 1),
                256,
                &mut args!(codes.ptr, scales.ptr, wd.ptr, sd.ptr, e, r, k),
            )?;
            // The stored copies go back to the device once the copy has run.
            self.dev.synchronize()?;
            Ok((wd, sd))
        };
        let (w13, s13) = tensor(&w.w13)?;
        let (w2, s2) = tensor(&w.w2)?;
        Ok(HipLayer {
            config: layer.config.clone(),
            correction_bias: w.e_score_correction_bias.is_some(),
            nv4,
            nv4_rows: rows,
            w13,
            s13,
            w2,
            s2,
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

/// An expert tensor's (experts, rows, 32-blocks per row) for `mx_nv4_rows`, whose indices are
/// 32-bit within an expert (hip/nv4.h `Nv4Rows`).
fn nv4_rows_shape(t: &MxTensor) -> Result<(usize, usize, usize), BackendError> {
    let &[experts, nrows, k] = t.shape.as_slice() else {
        return Err(BackendError::Device(format!(
            "an expert weight tensor of shape {:?}: expected [experts, rows, K]",
            t.shape
        )));
    };
    let kblocks = k / BLOCK;
    let per_expert = nrows.next_multiple_of(16) as u64 * kblocks.next_multiple_of(4) as u64;
    if per_expert >= 1 << 32 || experts as u64 * per_expert > (i32::MAX as u64) * 256 {
        return Err(BackendError::Device(format!(
            "an expert weight tensor of shape {:?} is too large for MXMOE_HIP_NV4_ROWS=1 \
             (32-bit block indices per expert, at most 2^31 blocks of 256 copies): unset it",
            t.shape
        )));
    }
    Ok((experts, nrows, kblocks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::MxFormat;

    fn tensor(shape: &[usize]) -> MxTensor {
        MxTensor {
            format: MxFormat::Fp4E2M1,
            shape: shape.to_vec(),
            data: Vec::new().into(),
            scales: Vec::new().into(),
        }
    }

    /// The rows order's shape: [experts, rows, K] with 32-bit block indices per expert and a
    /// copy grid the driver takes; anything else is an error naming the shape, not a wrap.
    #[test]
    fn nv4_rows_shape_checks_its_limits() {
        // gpt-oss-120b's w13: 128 experts x 5760 rows x 2880 (90 blocks)
        assert_eq!(
            nv4_rows_shape(&tensor(&[128, 5760, 2880])).unwrap(),
            (128, 5760, 90)
        );
        for bad in [
            &[5760usize, 2880][..],
            &[1, 1 << 20, 1 << 17], // 2^20 rows x 2^12 blocks = 2^32 per expert
            &[1 << 14, 1 << 16, 1 << 15], // 2^26 blocks per expert x 2^14 experts: 2^40
        ] {
            let e = nv4_rows_shape(&tensor(bad)).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
