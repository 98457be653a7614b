//! gpt-oss checkpoints (Hugging Face and original openai/gpt-oss names) holding one MoE layer.

use super::layer::{finish_named, opt_floats, router_from_meta, LoadedLayer};
use super::validate::LayerNames;
use super::{IoError, StFile};
use crate::format::{FormatError, MxFormat, MxTensor, ScaleMode, BLOCK};
use crate::moe::{Activation, MoeConfig, MoeLayer, MoeWeights, RouterConfig, Scoring};
use crate::scheme::Scheme;

/// The gpt-oss expert tensor names found in a file: (prefix, style).
pub(crate) fn gptoss_prefixes(f: &StFile) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for n in f.names() {
        if let Some(p) = n.strip_suffix("gate_up_proj_blocks") {
            out.push((p.to_string(), true)); // Hugging Face names
        } else if let Some(p) = n.strip_suffix("mlp1_weight.blocks") {
            out.push((p.to_string(), false)); // openai/gpt-oss original names
        }
    }
    out
}

/// gpt-oss: `*_blocks` `[E, N, K/32, 16]` (FP4, low nibble first), `*_scales` `[E, N, K/32]`,
/// `*_bias` `[E, N]`; gate/up rows interleaved -> `swigluoai`, top-k-then-softmax, top-4,
/// weight-only MXFP4 (NUMERICS.md 9.3 and 11).
pub(crate) fn load_gptoss(f: &StFile, prefix: &str, hf: bool) -> Result<LoadedLayer, IoError> {
    let (b1, s1, bias1, b2, s2, bias2) = if hf {
        (
            format!("{prefix}gate_up_proj_blocks"),
            format!("{prefix}gate_up_proj_scales"),
            format!("{prefix}gate_up_proj_bias"),
            format!("{prefix}down_proj_blocks"),
            format!("{prefix}down_proj_scales"),
            format!("{prefix}down_proj_bias"),
        )
    } else {
        (
            format!("{prefix}mlp1_weight.blocks"),
            format!("{prefix}mlp1_weight.scales"),
            format!("{prefix}mlp1_bias"),
            format!("{prefix}mlp2_weight.blocks"),
            format!("{prefix}mlp2_weight.scales"),
            format!("{prefix}mlp2_bias"),
        )
    };
    let load = |bn: &str, sn: &str| -> Result<MxTensor, IoError> {
        let (data, bs) = f.bytes_u8(bn)?;
        if bs.len() != 4 || bs[3] != 16 {
            return Err(f.shape_err(bn, "[E, N, K/32, 16]".into(), bs));
        }
        let (scales, ss) = f.bytes_u8(sn)?;
        if ss != bs[..3] {
            return Err(f.shape_err(sn, format!("{:?} (blocks.shape[:-1])", &bs[..3]), ss));
        }
        MxTensor::new(
            MxFormat::Fp4E2M1,
            vec![bs[0], bs[1], bs[2] * BLOCK],
            data,
            scales,
        )
        .map_err(|e: FormatError| IoError::Invalid {
            path: f.path.clone(),
            msg: format!("{bn}: {e}"),
        })
    };
    let w13 = load(&b1, &s1)?;
    let w2 = load(&b2, &s2)?;
    let (e, i2, h) = (w13.shape[0], w13.shape[1], w13.shape[2]);
    let i = i2 / 2;
    if i2 % 2 != 0 || w2.shape != [e, h, i] {
        return Err(f.shape_err(
            &b2,
            format!("[E = {e}, H = {h}, I/32 = {}, 16]", i / BLOCK),
            f.shape(&b2)?,
        ));
    }
    let defaults = RouterConfig {
        scoring: Scoring::TopkSoftmax,
        top_k: 4.min(e),
        renormalize: false,
        ..RouterConfig::default()
    };
    let layer = MoeLayer {
        config: MoeConfig {
            scheme: Scheme::new(MxFormat::Fp4E2M1, None),
            activation: Activation::SwigluOai,
            router: router_from_meta(f, defaults)?,
            act_scale_mode: ScaleMode::Even,
            n_experts: e,
            hidden: h,
            inter: i,
            local_experts: w13.shape[0],
        },
        weights: MoeWeights {
            w13,
            w2,
            w13_bias: opt_floats(f, &bias1, &[e, 2 * i])?,
            w2_bias: opt_floats(f, &bias2, &[e, h])?,
            e_score_correction_bias: None,
            expert_map: None,
        },
    };
    let names = LayerNames {
        w13_scale: &s1,
        w2_scale: &s2,
        w13_bias: &bias1,
        w2_bias: &bias2,
    };
    finish_named(f, layer, None, None, &names)
}
