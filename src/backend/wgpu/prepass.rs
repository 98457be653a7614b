//! Kernel k64p's activation pre-passes (shaders/moe_coop_prepass.wgsl: `coopp_prep1` /
//! `coopp_prep2` convert a stage's activations once into f16 hi / lo rows and row exponents)
//! and the GEMMs that read them (k64p, k64pw, the tiled `gemm*_pre_ref`): their bind groups'
//! binding lists (`*_BINDINGS`, checked by tests/shaders.rs against the entry points' derived
//! layouts), the buffers behind each binding number (`PreBufs`), and [`coop_prepass`], a
//! pre-pass run alone (a test and diagnostic hook). The forward (moe.rs, fwd_cache.rs) builds
//! its pre-pass bind groups from the same lists.

use super::context::Context;
use super::source::{Shader, FMT_NONE};
use crate::backend::BackendError;

/// The bindings of the cooperative GEMM's kernel k64p (`coop64p_gemm1/2`): the GEMM's own
/// (parameters, row lists, tiles, weights, scales, output, bias, router weights, the FP4 vec4
/// view) and the pre-converted activations (17 hi, 18 lo, 19 row exponents); no x_in.
/// `tests/shaders.rs` checks them against what naga finds the entry points use (a bind group
/// must name exactly the bindings of the pipeline's derived layout).
pub const COOP64P_BINDINGS: [u32; 12] = [0, 3, 5, 7, 8, 9, 10, 11, 13, 17, 18, 19];
/// The bindings of kernel k64pw (`coop64pw_gemm1/2`): k64p's with the vec4 views of the
/// pre-converted activations (20 hi, 21 lo) instead of their f16 views.
pub const COOP64PW_BINDINGS: [u32; 12] = [0, 3, 5, 7, 8, 9, 10, 11, 13, 19, 20, 21];
/// The bindings of `gemm1_pre_ref` / `gemm2_pre_ref` (the tiled GEMM over the pre-converted
/// rows; `Context::gemm_pre_ref`).
pub const GEMM_PRE_REF_BINDINGS: [u32; 11] = [0, 3, 5, 7, 8, 9, 10, 11, 17, 18, 19];
/// The bindings of the pre-passes `coopp_prep1` (token rows scattered to the pairs' rows:
/// row_of_pair) and `coopp_prep2` (rows kept).
pub const COOPP_PREP1_BINDINGS: [u32; 6] = [0, 4, 6, 17, 18, 19];
pub const COOPP_PREP2_BINDINGS: [u32; 5] = [0, 6, 17, 18, 19];
/// Rows of padding after the pre-converted rows: a tile's 64 rows are loaded whole.
pub(super) const COOPP_PAD_ROWS: usize = 64;

/// The buffers of a pre-pass (`coopp_prep1` / `coopp_prep2`) or a pre-pass kernel's GEMM
/// (k64p, k64pw) bind group, by binding number.
pub(super) struct PreBufs<'a> {
    pub(super) params: &'a wgpu::Buffer,
    /// pair_of_row (3), row_of_pair (4), tiles (5)
    pub(super) rows: &'a wgpu::Buffer,
    pub(super) slot: &'a wgpu::Buffer,
    pub(super) tiles: &'a wgpu::Buffer,
    /// x_in (6): the pre-pass's input rows
    pub(super) x: &'a wgpu::Buffer,
    /// weights (7 and their vec4 view 13), scales (8), output (9), bias (10), router weights (11)
    pub(super) w: &'a wgpu::Buffer,
    pub(super) sc: &'a wgpu::Buffer,
    pub(super) out: &'a wgpu::Buffer,
    pub(super) bias: &'a wgpu::Buffer,
    pub(super) topw: &'a wgpu::Buffer,
    /// the pre-converted activations: hi (17 / 20), lo (18 / 21), row exponents (19)
    pub(super) hi: &'a wgpu::Buffer,
    pub(super) lo: &'a wgpu::Buffer,
    pub(super) exp: &'a wgpu::Buffer,
}

impl<'a> PreBufs<'a> {
    /// Exactly the entries of `bindings` (one of the `COOP*_BINDINGS` lists, which
    /// `tests/shaders.rs` checks against the entry points' derived layouts).
    pub(super) fn entries(&self, bindings: &[u32]) -> Vec<(u32, &'a wgpu::Buffer)> {
        bindings
            .iter()
            .map(|&i| {
                let b = match i {
                    0 => self.params,
                    3 => self.rows,
                    4 => self.slot,
                    5 => self.tiles,
                    6 => self.x,
                    7 | 13 => self.w,
                    8 => self.sc,
                    9 => self.out,
                    10 => self.bias,
                    11 => self.topw,
                    17 | 20 => self.hi,
                    18 | 21 => self.lo,
                    19 => self.exp,
                    _ => unreachable!("binding {i} is in no COOP*_BINDINGS list"),
                };
                (i, b)
            })
            .collect()
    }
}

/// What kernel k64p's pre-pass produced for `rows` GEMM rows of K values: f16 bits of hi and
/// lo (`[rows][K]`; lo all zero for schemes with MX activations) and the row exponents.
#[derive(Clone, Debug, PartialEq)]
pub struct CoopPrepassOut {
    pub hi: Vec<u16>,
    pub lo: Vec<u16>,
    pub exp: Vec<i32>,
}

/// Run one of kernel k64p's activation pre-passes alone (a test and diagnostic hook; plain
/// compute, so it runs on every adapter): `stage` 1 converts the token rows `x` ([m][kk]) into
/// the GEMM rows `row_of_pair[t * top_k + s]` (-1: skipped) of `m * top_k` rows, stage 2 the
/// rows `x` ([m * top_k][kk]) in place. `weight_only` writes lo too (ACT_FMT = FMT_NONE).
/// Rows no pair writes come back as they were: zeros.
#[allow(clippy::too_many_arguments)]
pub fn coop_prepass(
    ctx: &Context,
    stage: u32,
    x: &[f32],
    m: usize,
    kk: usize,
    top_k: usize,
    row_of_pair: &[i32],
    weight_only: bool,
) -> Result<CoopPrepassOut, BackendError> {
    let rows = m * top_k;
    let n_in = if stage == 1 { m } else { rows };
    let bad = |what: String| BackendError::Device(format!("coop_prepass: {what}"));
    if stage != 1 && stage != 2 {
        return Err(bad(format!("stage {stage}: expected 1 or 2")));
    }
    if kk == 0 || !kk.is_multiple_of(32) || x.len() != n_in * kk || m == 0 || top_k == 0 {
        return Err(bad(format!(
            "{} values for {n_in} rows of K = {kk} (K a positive multiple of 32)",
            x.len()
        )));
    }
    if stage == 1
        && (row_of_pair.len() != rows || row_of_pair.iter().any(|&r| r >= rows as i32 || r < -1))
    {
        return Err(bad(format!(
            "row_of_pair must hold {rows} rows in -1..{rows}, got {:?}",
            row_of_pair
        )));
    }
    let act = if weight_only { FMT_NONE } else { 0 };
    let entry = if stage == 1 {
        "coopp_prep1"
    } else {
        "coopp_prep2"
    };
    let pipe = ctx.pipeline(Shader::MoeCoopPrepass, entry, &[("ACT_FMT", act)])?;
    let mut p = [0u32; 16];
    p[0] = m as u32;
    p[1] = top_k as u32;
    p[2] = kk as u32; // hidden (stage 1)
    p[3] = kk as u32; // inter (stage 2)
    let params = ctx.uniform(bytemuck::cast_slice(&p));
    let xb = ctx.upload_owned("coop_prepass_x", bytemuck::cast_slice(x));
    let rop = ctx.upload_owned(
        "coop_prepass_row_of_pair",
        bytemuck::cast_slice(if row_of_pair.is_empty() {
            &[0i32][..]
        } else {
            row_of_pair
        }),
    );
    // Pooled buffers (readable back), zeroed: rows no pair writes read back as zeros.
    let zeros = |n: usize| {
        let b = ctx.storage(n as u64);
        ctx.queue.write_buffer(&b, 0, &vec![0u8; n]);
        b
    };
    let half_bytes = rows * kk * 2;
    let (hi, lo, ex) = (zeros(half_bytes), zeros(half_bytes), zeros(rows * 4));
    // The forward's own binding lists (PreBufs), so that this hook also checks them.
    let pb = PreBufs {
        params: &params,
        rows: &rop,
        slot: &rop,
        tiles: &rop,
        x: &xb,
        w: &rop,
        sc: &rop,
        out: &rop,
        bias: &rop,
        topw: &rop,
        hi: &hi,
        lo: &lo,
        exp: &ex,
    };
    let list: &[u32] = if stage == 1 {
        &COOPP_PREP1_BINDINGS
    } else {
        &COOPP_PREP2_BINDINGS
    };
    let bg = ctx.bind(&pipe, &pb.entries(list));
    let mut enc = ctx
        .device
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("coop_prepass"),
        });
    {
        let mut ps = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        ps.set_pipeline(&pipe);
        ps.set_bind_group(0, &bg, &[]);
        let (gx, gy) = ctx.grid(n_in as u32);
        ps.dispatch_workgroups(gx, gy, 1);
    }
    let r = ctx.submit_and_read(
        enc,
        &[
            (&hi, half_bytes as u64),
            (&lo, half_bytes as u64),
            (&ex, (rows * 4) as u64),
        ],
    )?;
    ctx.give([params, hi, lo, ex]);
    Ok(CoopPrepassOut {
        hi: bytemuck::pod_collect_to_vec(&r[0]),
        lo: bytemuck::pod_collect_to_vec(&r[1]),
        exp: bytemuck::pod_collect_to_vec(&r[2]),
    })
}
