//! Naming conventions of MoE checkpoints: how the layers of a [`Store`] are found, described
//! (headers only) and loaded into a [`MoeLayer`].
//!
//! Size (~880 lines): one loader per convention below, each self-contained; the seam is one
//! file per convention (`conventions/<name>.rs`) behind the shared detection.
//!
//! | convention | expert tensors (per layer prefix) | router |
//! |---|---|---|
//! | `layer-bundle` | `w13_weight(_scale)`, `w2_weight(_scale)`, `w13_bias`, `w2_bias` (ARCHITECTURE.md) | `router_weight`, `router_bias` |
//! | `vllm` | `model.layers.N.mlp.experts.w13_weight(_scale)`, `w2_weight(_scale)`, `w13_bias`, `w2_bias` (vLLM `FusedMoE` parameter names) | `mlp.gate.weight` or `mlp.router.weight` / `.bias` |
//! | `hf-gpt-oss` | `model.layers.N.mlp.experts.gate_up_proj_blocks` `[E, 2I, H/32, 16]`, `_scales` `[E, 2I, H/32]`, `_bias` `[E, 2I]`, `down_proj_*` (transformers `GptOssExperts` + `Mxfp4HfQuantizer`) | `mlp.router.weight` `[E, H]`, `mlp.router.bias` |
//! | `gpt-oss-original` | `block.N.mlp.mlp1_weight.blocks` / `.scales`, `mlp1_bias`, `mlp2_*` (openai/gpt-oss `torch/model.py` `MLPBlock`) | `block.N.mlp.gate.weight` / `.bias` |
//! | `quark-per-expert` | `model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight` (u8 packed) + `.weight_scale` (u8 E8M0) (AMD Quark export, as vLLM's `quark_moe.py` loads it) | `mlp.gate.weight` |
//! | `deepseek` | the per-expert names above | `mlp.gate.weight` + `mlp.gate.e_score_correction_bias` (DeepSeek-V3/R1 `modeling_deepseek.py` `MoEGate`) |
//!
//! gpt-oss packs FP4 low nibble first, element 2j in the low nibble of byte j (transformers
//! `convert_moe_packed_tensors`: `lut[idx_lo]` then `lut[idx_hi]`, interleaved), which is the
//! OCP order we store (NUMERICS.md 9.1), so its blocks are used as they are; its gate/up rows
//! are interleaved (gpt-oss `swiglu`: `x[..., ::2]` gate, `x[..., 1::2]` linear), our
//! `swigluoai` layout. Quark per-expert weights are `[N, packed(K)]` per expert with gate and
//! up separate: stacked as `[gate; up]` rows, the `silu` layout.
//!
//! The scheme comes from `--scheme`, else the file's `scheme` metadata, else the convention
//! (gpt-oss is `w_mxfp4`: MXFP4 weights, unquantized activations, `quantization_config`
//! `{"quant_method": "mxfp4"}`), else `config.json`'s `quantization_config` (Quark:
//! `global_quant_config.weight.dtype` / `.input_tensors.dtype`, as vLLM's `quark.py`
//! `_is_ocp_mx` reads them), else the weight dtype/shape (weight-only, said in the listing).
//!
//! Over 600 lines: six conventions share one describe/load pipeline (names -> scheme -> routing
//! keys -> tensors); splitting it per convention would repeat that pipeline six times.

use super::gptoss::gptoss_mx;
use super::model::Store;
use super::stfile::list_names;
use super::{IoError, LoadedLayer, StFile};
use crate::format::{Bytes, MxFormat, MxTensor, ScaleMode, BLOCK};
use crate::moe::{
    Activation, MoeConfig, MoeLayer, MoeWeights, RouterConfig, RouterWeights, Scoring,
};
use crate::scheme::Scheme;
use safetensors::tensor::Dtype;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// A naming convention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Convention {
    Bundle,
    Vllm,
    HfGptOss,
    GptOssOriginal,
    QuarkPerExpert,
    DeepSeek,
    GgufGptOss,
}

impl Convention {
    pub const fn name(self) -> &'static str {
        match self {
            Convention::Bundle => "layer-bundle",
            Convention::Vllm => "vllm",
            Convention::HfGptOss => "hf-gpt-oss",
            Convention::GptOssOriginal => "gpt-oss-original",
            Convention::QuarkPerExpert => "quark-per-expert",
            Convention::DeepSeek => "deepseek",
            Convention::GgufGptOss => "gguf",
        }
    }
    fn is_gpt_oss(self) -> bool {
        matches!(
            self,
            Convention::HfGptOss | Convention::GptOssOriginal | Convention::GgufGptOss
        )
    }
}

impl fmt::Display for Convention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the error for an unknown layout lists as tried.
const TRIED: &str = "layer-bundle (w13_weight + w2_weight), vllm (*.experts.w13_weight), \
hf-gpt-oss (*.experts.gate_up_proj_blocks), gpt-oss-original (*.mlp.mlp1_weight.blocks), \
quark-per-expert / deepseek (*.experts.E.gate_proj.weight + weight_scale), gguf (blk.N.ffn_*_exps.weight, MXFP4)";

/// The tensors of one layer.
#[derive(Clone, Debug)]
pub(crate) enum Key {
    /// Stacked experts `[E, ...]`: vLLM names, a bundle, or gpt-oss (4-D blocks).
    Stacked(Names),
    /// One tensor set per expert (Quark / DeepSeek): `{prefix}{e}.{gate,up,down}_proj.weight`.
    PerExpert {
        prefix: String,
        experts: usize,
        corr: Option<String>,
        router_w: Option<String>,
        router_b: Option<String>,
    },
    /// A GGUF block number.
    Gguf(usize),
}

/// The tensor names of a stacked layer.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    w13: String,
    w13_scale: String,
    w2: String,
    w2_scale: String,
    /// gpt-oss blocks: `[E, N, K/32, 16]` instead of `[E, N, packed(K)]`.
    blocks4d: bool,
    w13_bias: String,
    w2_bias: String,
    corr: Option<String>,
    expert_map: Option<String>,
    router_w: Option<String>,
    router_b: Option<String>,
    orig: Option<(String, String)>,
}

/// One MoE layer of a checkpoint, described from headers and `config.json`.
#[derive(Clone, Debug)]
pub struct LayerInfo {
    /// The model's layer number, or the position in the listing for names without one.
    pub index: usize,
    /// The layer's name prefix (e.g. `model.layers.3.mlp`; empty for a layer bundle).
    pub name: String,
    pub convention: Convention,
    /// Where the scheme came from (`--scheme`, metadata, config.json, inferred ...).
    pub scheme_from: String,
    /// Packed weight + scale bytes.
    pub bytes: usize,
    /// Whether the layer has the model's router weights.
    pub router: bool,
    /// The configuration the layer loads with (scheme, shapes, routing).
    pub config: MoeConfig,
    pub(crate) key: Key,
}

pub(crate) fn invalid(path: &str, msg: String) -> IoError {
    IoError::Invalid {
        path: path.to_string(),
        msg,
    }
}

/// The first dot-separated number of a name (`model.layers.12.mlp` -> 12).
fn layer_number(name: &str) -> Option<usize> {
    name.split('.').find_map(|c| c.parse::<usize>().ok())
}

/// Find and describe every MoE layer of a store, in layer order.
pub fn find_layers(s: &Store, scheme: Option<Scheme>) -> Result<Vec<LayerInfo>, IoError> {
    let mut keys: Vec<(String, Convention, Key)> = Vec::new();
    let mut per_expert: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for n in s.names() {
        if let Some(p) = n.strip_suffix("w13_weight") {
            if s.has(&format!("{p}w2_weight")) {
                let conv = if p.is_empty() {
                    Convention::Bundle
                } else {
                    Convention::Vllm
                };
                keys.push((block_name(p), conv, Key::Stacked(vllm_names(s, p))));
            }
        } else if let Some(p) = n.strip_suffix("gate_up_proj_blocks") {
            keys.push((
                block_name(p),
                Convention::HfGptOss,
                Key::Stacked(hf_names(s, p)),
            ));
        } else if let Some(p) = n.strip_suffix("mlp1_weight.blocks") {
            keys.push((
                block_name(p),
                Convention::GptOssOriginal,
                Key::Stacked(orig_names(s, p)),
            ));
        } else if let Some(rest) = n.strip_suffix(".gate_proj.weight") {
            if let Some((p, e)) = rest.rsplit_once('.') {
                if p.ends_with("experts") {
                    if let Ok(e) = e.parse::<usize>() {
                        per_expert.entry(format!("{p}.")).or_default().push(e);
                    }
                }
            }
        }
    }
    for (p, mut ids) in per_expert {
        ids.sort_unstable();
        let experts = ids.len();
        if ids.iter().enumerate().any(|(i, &e)| i != e) {
            let missing: Vec<String> = (0..=*ids.last().unwrap_or(&0))
                .filter(|e| ids.binary_search(e).is_err())
                .map(|e| e.to_string())
                .collect();
            return Err(invalid(
                &s.root,
                format!(
                    "layer '{}': experts {} have no {p}E.gate_proj.weight",
                    block_name(&p),
                    list_names(&missing)
                ),
            ));
        }
        let base = p.strip_suffix("experts.").unwrap_or(&p).to_string();
        let corr = Some(format!("{base}gate.e_score_correction_bias")).filter(|c| s.has(c));
        let conv = if corr.is_some() {
            Convention::DeepSeek
        } else {
            Convention::QuarkPerExpert
        };
        let router_w = Some(format!("{base}gate.weight")).filter(|c| s.has(c));
        let router_b = Some(format!("{base}gate.bias")).filter(|c| s.has(c));
        keys.push((
            block_name(&p),
            conv,
            Key::PerExpert {
                prefix: p,
                experts,
                corr,
                router_w,
                router_b,
            },
        ));
    }
    if keys.is_empty() {
        return Err(invalid(
            &s.root,
            format!(
                "no MoE layer found. Tensors: {}. Conventions tried: {TRIED}",
                list_names(s.names())
            ),
        ));
    }
    // Layer numbers when every layer has a distinct one, else positions.
    keys.sort_by(|a, b| (layer_number(&a.0), &a.0).cmp(&(layer_number(&b.0), &b.0)));
    let nums: Vec<Option<usize>> = keys.iter().map(|k| layer_number(&k.0)).collect();
    let mut distinct = nums.clone();
    distinct.dedup();
    let use_nums = nums.iter().all(Option::is_some) && distinct.len() == nums.len();
    keys.into_iter()
        .enumerate()
        .map(|(pos, (name, conv, key))| {
            let index = if use_nums {
                layer_number(&name).unwrap_or(pos)
            } else {
                pos
            };
            describe(s, index, name, conv, key, scheme)
        })
        .collect()
}

/// `model.layers.3.mlp.experts.` -> `model.layers.3.mlp`; `block.0.mlp.` -> `block.0.mlp`.
fn block_name(p: &str) -> String {
    let p = p.strip_suffix('.').unwrap_or(p);
    p.strip_suffix(".experts")
        .or_else(|| p.strip_suffix("experts"))
        .unwrap_or(p)
        .trim_end_matches('.')
        .to_string()
}

fn opt(s: &Store, n: String) -> Option<String> {
    s.has(&n).then_some(n)
}

fn vllm_names(s: &Store, p: &str) -> Names {
    let base = p.strip_suffix("experts.").unwrap_or(p);
    let (router_w, router_b) = if p.is_empty() {
        (opt(s, "router_weight".into()), opt(s, "router_bias".into()))
    } else {
        match opt(s, format!("{base}router.weight")) {
            Some(w) => (Some(w), opt(s, format!("{base}router.bias"))),
            None => (
                opt(s, format!("{base}gate.weight")),
                opt(s, format!("{base}gate.bias")),
            ),
        }
    };
    let orig = match (
        opt(s, format!("{p}w13_weight_orig")),
        opt(s, format!("{p}w2_weight_orig")),
    ) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => None,
    };
    Names {
        w13: format!("{p}w13_weight"),
        w13_scale: format!("{p}w13_weight_scale"),
        w2: format!("{p}w2_weight"),
        w2_scale: format!("{p}w2_weight_scale"),
        blocks4d: false,
        w13_bias: format!("{p}w13_bias"),
        w2_bias: format!("{p}w2_bias"),
        corr: opt(s, format!("{p}e_score_correction_bias"))
            .or_else(|| opt(s, format!("{base}gate.e_score_correction_bias"))),
        expert_map: opt(s, format!("{p}expert_map")),
        router_w,
        router_b,
        orig,
    }
}

fn hf_names(s: &Store, p: &str) -> Names {
    let base = p.strip_suffix("experts.").unwrap_or(p);
    Names {
        w13: format!("{p}gate_up_proj_blocks"),
        w13_scale: format!("{p}gate_up_proj_scales"),
        w2: format!("{p}down_proj_blocks"),
        w2_scale: format!("{p}down_proj_scales"),
        blocks4d: true,
        w13_bias: format!("{p}gate_up_proj_bias"),
        w2_bias: format!("{p}down_proj_bias"),
        corr: None,
        expert_map: None,
        router_w: opt(s, format!("{base}router.weight")),
        router_b: opt(s, format!("{base}router.bias")),
        orig: None,
    }
}

fn orig_names(s: &Store, p: &str) -> Names {
    Names {
        w13: format!("{p}mlp1_weight.blocks"),
        w13_scale: format!("{p}mlp1_weight.scales"),
        w2: format!("{p}mlp2_weight.blocks"),
        w2_scale: format!("{p}mlp2_weight.scales"),
        blocks4d: true,
        w13_bias: format!("{p}mlp1_bias"),
        w2_bias: format!("{p}mlp2_bias"),
        corr: None,
        expert_map: None,
        router_w: opt(s, format!("{p}gate.weight")),
        router_b: opt(s, format!("{p}gate.bias")),
        orig: None,
    }
}

/// A `config.json` value, looked up at the top level and under `text_config`.
pub(crate) fn cfg<'a>(c: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let c = c?;
    c.get(key)
        .or_else(|| c.get("text_config").and_then(|t| t.get(key)))
}

fn cfg_usize(c: Option<&Value>, keys: &[&str]) -> Option<usize> {
    keys.iter()
        .find_map(|k| cfg(c, k).and_then(Value::as_u64))
        .map(|v| v as usize)
}

/// The scheme `config.json`'s `quantization_config` states, if it states one we know.
pub(crate) fn config_scheme(c: Option<&Value>) -> Option<Result<Scheme, String>> {
    let q = cfg(c, "quantization_config")?;
    match q.get("quant_method").and_then(Value::as_str)? {
        // transformers' Mxfp4Config (gpt-oss): MXFP4 expert weights, activations unquantized.
        "mxfp4" => Some(Ok(Scheme::new(MxFormat::Fp4E2M1, None))),
        "quark" => {
            let g = q.get("global_quant_config")?;
            let fmt = |spec: &Value, what: &str| -> Result<MxFormat, String> {
                let dt = spec.get("dtype").and_then(Value::as_str).unwrap_or("?");
                if let Some(gs) = spec.get("group_size").and_then(Value::as_u64) {
                    if gs != BLOCK as u64 {
                        return Err(format!(
                            "quantization_config: {what} group_size {gs}, expected 32 (OCP MX)"
                        ));
                    }
                }
                dt.parse::<MxFormat>().map_err(|_| {
                    format!("quantization_config: {what} dtype '{dt}' is not an MX format")
                })
            };
            let w = match g.get("weight") {
                Some(w) if w.is_object() => fmt(w, "weight"),
                _ => {
                    return Some(Err(
                        "quantization_config: quark without a weight spec".into()
                    ))
                }
            };
            let a = match g.get("input_tensors") {
                Some(a) if a.is_object() => fmt(a, "input_tensors").map(Some),
                _ => Ok(None),
            };
            Some(w.and_then(|w| a.map(|a| Scheme::new(w, a))))
        }
        _ => None,
    }
}

/// The weight format from the codes' dtype, or from the packed width against the scale count.
fn infer_format(
    f: &StFile,
    name: &str,
    dt: Dtype,
    packed: usize,
    k: usize,
) -> Result<MxFormat, IoError> {
    let direct = match dt {
        Dtype::F4 => Some(MxFormat::Fp4E2M1),
        Dtype::F6_E2M3 => Some(MxFormat::Fp6E2M3),
        Dtype::F6_E3M2 => Some(MxFormat::Fp6E3M2),
        Dtype::F8_E4M3 => Some(MxFormat::Fp8E4M3),
        Dtype::F8_E5M2 => Some(MxFormat::Fp8E5M2),
        _ => None,
    };
    if let Some(x) = direct {
        return Ok(x);
    }
    let which = if packed * 2 == k {
        return Ok(MxFormat::Fp4E2M1);
    } else if packed * 4 == k * 3 {
        "an FP6 format (mxfp6_e2m3 or mxfp6_e3m2)"
    } else if packed == k {
        "an 8-bit format (mxfp8_e4m3, mxfp8_e5m2 or mxint8)"
    } else {
        "no MX format"
    };
    Err(IoError::Invalid {
        path: f.path.clone(),
        msg: format!(
            "tensor '{name}': {packed} bytes per row for K = {k} is {which}; \
             the file records no scheme: say it with --scheme (e.g. w_mxfp6_e3m2_a_mxfp6_e3m2) \
             or in config.json's quantization_config"
        ),
    })
}

/// Scheme and where it came from.
fn resolve_scheme(
    s: &Store,
    conv: Convention,
    data: &str,
    scale: &str,
    blocks4d: bool,
    over: Option<Scheme>,
) -> Result<(Scheme, String), IoError> {
    if let Some(x) = over {
        return Ok((x, "--scheme".into()));
    }
    let f = s.file(data)?;
    if let Some(x) = f.meta_parse::<Scheme>("scheme")? {
        return Ok((x, "file metadata".into()));
    }
    if conv.is_gpt_oss() {
        return Ok((
            Scheme::new(MxFormat::Fp4E2M1, None),
            "gpt-oss (MXFP4 weights)".into(),
        ));
    }
    if let Some(r) = config_scheme(s.config.as_ref()) {
        return r
            .map(|x| (x, "config.json".into()))
            .map_err(|m| invalid(&format!("{}/config.json", s.root), m));
    }
    let dt = f.dtype(data)?;
    let ps = f.shape(data)?;
    let ss = s.file(scale)?.shape(scale)?;
    let k = ss.last().copied().unwrap_or(0) * BLOCK;
    let packed = if blocks4d {
        ps.iter().rev().take(2).product()
    } else {
        ps.last().copied().unwrap_or(0)
    };
    let w = infer_format(f, data, dt, packed, k)?;
    Ok((
        Scheme::new(w, None),
        "inferred from the weights (no activation format recorded: weight-only; --scheme to say)"
            .into(),
    ))
}

/// Routing defaults from the convention and `config.json`, then the file's metadata keys.
fn router_config(
    s: &Store,
    conv: Convention,
    meta_file: Option<&StFile>,
    n_experts: usize,
) -> Result<RouterConfig, IoError> {
    let c = s.config.as_ref();
    let model_type = cfg(c, "model_type").and_then(Value::as_str).unwrap_or("");
    let top = cfg_usize(c, &["num_experts_per_tok", "experts_per_token"]);
    let norm = cfg(c, "norm_topk_prob").and_then(Value::as_bool);
    let mut r = if conv.is_gpt_oss() || model_type == "gpt_oss" {
        // gpt-oss: softmax over the top-k logits, top-4 (gpt-oss `MLPBlock`).
        RouterConfig {
            scoring: Scoring::TopkSoftmax,
            top_k: top.unwrap_or(4),
            renormalize: false,
            ..RouterConfig::default()
        }
    } else if conv == Convention::DeepSeek
        || cfg(c, "scoring_func").and_then(Value::as_str) == Some("sigmoid")
    {
        // DeepSeek-V3/R1 `MoEGate`: sigmoid scores, group-limited top-k, norm_topk_prob,
        // routed_scaling_factor.
        RouterConfig {
            scoring: Scoring::Sigmoid,
            top_k: top.unwrap_or(8),
            renormalize: norm.unwrap_or(true),
            n_group: cfg_usize(c, &["n_group"]),
            topk_group: cfg_usize(c, &["topk_group"]),
            routed_scaling_factor: cfg(c, "routed_scaling_factor")
                .and_then(Value::as_f64)
                .unwrap_or(1.0) as f32,
            apply_router_weight_on_input: false,
        }
    } else {
        RouterConfig {
            scoring: Scoring::Softmax,
            top_k: top.unwrap_or(RouterConfig::default().top_k),
            renormalize: norm.unwrap_or(true),
            ..RouterConfig::default()
        }
    };
    if top.is_none() {
        r.top_k = r.top_k.min(n_experts);
    }
    if r.n_group.is_some() != r.topk_group.is_some() {
        r.n_group = None;
        r.topk_group = None;
    }
    match meta_file {
        Some(f) => super::layer::router_from_meta(f, r),
        None => Ok(r),
    }
}

pub(crate) fn shape_err(f: &StFile, t: &str, expected: String) -> IoError {
    IoError::Shape {
        path: f.path.clone(),
        tensor: t.into(),
        expected,
        got: f.shape(t).unwrap_or_default(),
    }
}

/// Describe a layer from its headers.
fn describe(
    s: &Store,
    index: usize,
    name: String,
    conv: Convention,
    key: Key,
    over: Option<Scheme>,
) -> Result<LayerInfo, IoError> {
    let (scheme, scheme_from, e, h, i, n_experts, meta_file, router) = match &key {
        Key::Stacked(n) => {
            let (scheme, from) = resolve_scheme(s, conv, &n.w13, &n.w13_scale, n.blocks4d, over)?;
            let f = s.file(&n.w13)?;
            let sf = s.file(&n.w13_scale)?;
            let ss = sf.shape(&n.w13_scale)?;
            if ss.len() != 3 || ss[1] % 2 != 0 || ss[0] == 0 {
                return Err(shape_err(
                    sf,
                    &n.w13_scale,
                    "[E, 2I, H/32] (3-D, E >= 1, even row count)".into(),
                ));
            }
            let (e, h, i) = (ss[0], ss[2] * BLOCK, ss[1] / 2);
            let n_experts = match &n.expert_map {
                Some(m) => s.file(m)?.shape(m)?.first().copied().unwrap_or(0),
                None => match f.meta_parse::<usize>("n_experts")? {
                    Some(x) => x,
                    None => e,
                },
            };
            // Layer bundles keep their routing keys in the metadata.
            let meta = (conv == Convention::Bundle).then_some(f);
            (scheme, from, e, h, i, n_experts, meta, n.router_w.is_some())
        }
        Key::PerExpert {
            prefix,
            experts,
            router_w,
            ..
        } => {
            let g = format!("{prefix}0.gate_proj.weight");
            let gs = format!("{prefix}0.gate_proj.weight_scale");
            let (scheme, from) = resolve_scheme(s, conv, &g, &gs, false, over)?;
            let sf = s.file(&gs)?;
            let ss = sf.shape(&gs)?;
            if ss.len() != 2 {
                return Err(shape_err(sf, &gs, "[I, H/32]".into()));
            }
            let (i, h) = (ss[0], ss[1] * BLOCK);
            (
                scheme,
                from,
                *experts,
                h,
                i,
                *experts,
                None,
                router_w.is_some(),
            )
        }
        Key::Gguf(_) => {
            return Err(invalid(
                &s.root,
                "a GGUF layer key in a safetensors store".into(),
            ))
        }
    };
    let activation = match meta_file.map(|f| f.meta_parse::<Activation>("activation")) {
        Some(r) => r?,
        None => None,
    };
    let activation = activation.unwrap_or(
        if conv.is_gpt_oss()
            || cfg(s.config.as_ref(), "model_type").and_then(Value::as_str) == Some("gpt_oss")
        {
            Activation::SwigluOai
        } else {
            Activation::Silu
        },
    );
    let act_scale_mode = match meta_file {
        Some(f) => f.meta_parse::<ScaleMode>("scale_mode")?.unwrap_or_default(),
        None => ScaleMode::default(),
    };
    let router_cfg = router_config(s, conv, meta_file, n_experts)?;
    let config = MoeConfig {
        scheme,
        activation,
        router: router_cfg,
        act_scale_mode,
        n_experts,
        local_experts: e,
        hidden: h,
        inter: i,
    };
    let w = scheme.weight;
    let bytes = e * (2 * i * (w.packed_len(h) + h / BLOCK) + h * (w.packed_len(i) + i / BLOCK));
    Ok(LayerInfo {
        index,
        name,
        convention: conv,
        scheme_from,
        bytes,
        router,
        config,
        key,
    })
}

fn floats_opt(s: &Store, name: Option<&str>, want: &[usize]) -> Result<Option<Vec<f32>>, IoError> {
    let Some(name) = name.filter(|n| s.has(n)) else {
        return Ok(None);
    };
    let f = s.file(name)?;
    let (v, sh) = f.floats(name)?;
    if sh != want {
        return Err(IoError::Shape {
            path: f.path.clone(),
            tensor: name.into(),
            expected: format!("{want:?}"),
            got: sh,
        });
    }
    Ok(Some(v))
}

/// The router weights `[E, H]` (+ bias `[E]`) when the layer has them.
fn router_weights(
    s: &Store,
    w: Option<&str>,
    b: Option<&str>,
    e: usize,
    h: usize,
) -> Result<Option<RouterWeights>, IoError> {
    let Some(weight) = floats_opt(s, w, &[e, h])? else {
        return Ok(None);
    };
    let bias = floats_opt(s, b, &[e])?;
    RouterWeights::new(weight, bias, e, h)
        .map(Some)
        .map_err(|err| invalid(&s.root, err.to_string()))
}

/// Load a described layer.
pub fn load(s: &Store, info: &LayerInfo) -> Result<LoadedLayer, IoError> {
    let c = &info.config;
    let (e, h, i, w) = (c.local_experts, c.hidden, c.inter, c.scheme.weight);
    let mx = |d: &str, sc: &str, four: bool| -> Result<MxTensor, IoError> {
        if four {
            gptoss_mx(s, d, sc)
        } else {
            s.file(d)?.mx_pair(d, sc, w)
        }
    };
    let (weights, router, orig, (check_path, names, meta_n)) = match &info.key {
        Key::Stacked(n) => {
            let w13 = mx(&n.w13, &n.w13_scale, n.blocks4d)?;
            let w2 = mx(&n.w2, &n.w2_scale, n.blocks4d)?;
            if w13.shape != [e, 2 * i, h] {
                return Err(shape_err(
                    s.file(&n.w13)?,
                    &n.w13,
                    format!("logical [E = {e}, 2I = {}, H = {h}]", 2 * i),
                ));
            }
            if w2.shape != [e, h, i] {
                return Err(shape_err(
                    s.file(&n.w2)?,
                    &n.w2,
                    format!("logical [E = {e}, H = {h}, I = {i}]"),
                ));
            }
            let expert_map = match &n.expert_map {
                Some(m) => {
                    let f = s.file(m)?;
                    let (v, sh) = f.ints(m)?;
                    if sh.len() != 1 {
                        return Err(shape_err(f, m, "[n_experts]".into()));
                    }
                    Some(
                        v.into_iter()
                            .map(|x| x.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
                            .collect::<Vec<i32>>(),
                    )
                }
                None => None,
            };
            let weights = MoeWeights {
                w13,
                w2,
                w13_bias: floats_opt(s, Some(&n.w13_bias), &[e, 2 * i])?,
                w2_bias: floats_opt(s, Some(&n.w2_bias), &[e, h])?,
                e_score_correction_bias: floats_opt(s, n.corr.as_deref(), &[c.n_experts])?,
                expert_map,
            };
            let router = router_weights(
                s,
                n.router_w.as_deref(),
                n.router_b.as_deref(),
                c.n_experts,
                h,
            )?;
            let orig = match &n.orig {
                Some((a, b)) => Some((
                    floats_opt(s, Some(a), &[e, 2 * i, h])?,
                    floats_opt(s, Some(b), &[e, h, i])?,
                )),
                None => None,
            };
            // What `validate::check_layer` needs: the file, the tensors' names, and a bundle's
            // `n_experts` metadata (checked against the expert_map).
            let f13 = s.file(&n.w13)?;
            let meta_n = match info.convention {
                Convention::Bundle => f13.meta_parse::<usize>("n_experts")?,
                _ => None,
            };
            let names = [
                n.w13_scale.clone(),
                n.w2_scale.clone(),
                n.w13_bias.clone(),
                n.w2_bias.clone(),
                n.expert_map.clone().unwrap_or_else(|| "expert_map".into()),
                n.corr
                    .clone()
                    .unwrap_or_else(|| "e_score_correction_bias".into()),
            ];
            (weights, router, orig, (f13.path.clone(), names, meta_n))
        }
        Key::PerExpert {
            prefix,
            corr,
            router_w,
            router_b,
            ..
        } => {
            let (w13, w2) = per_expert(s, prefix, e, h, i, w)?;
            let weights = MoeWeights {
                w13,
                w2,
                w13_bias: None,
                w2_bias: None,
                e_score_correction_bias: floats_opt(s, corr.as_deref(), &[e])?,
                expert_map: None,
            };
            let router = router_weights(s, router_w.as_deref(), router_b.as_deref(), e, h)?;
            let names = [
                format!("{prefix}*.{{gate,up}}_proj.weight_scale"),
                format!("{prefix}*.down_proj.weight_scale"),
                String::new(),
                String::new(),
                String::new(),
                corr.clone().unwrap_or_default(),
            ];
            (weights, router, None, (s.root.clone(), names, None))
        }
        Key::Gguf(_) => {
            return Err(invalid(
                &s.root,
                format!(
                    "layer '{}' is a GGUF layer: load it from its GGUF file",
                    info.name
                ),
            ))
        }
    };
    let layer = MoeLayer {
        config: info.config.clone(),
        weights,
    };
    // The file-level checks first: their messages name the file's keys and tensors.
    let [w13_scale, w2_scale, w13_bias, w2_bias, expert_map, correction_bias] = &names;
    let warnings = super::validate::check_layer(
        &check_path,
        &layer,
        &super::validate::LayerNames {
            w13_scale,
            w2_scale,
            w13_bias,
            w2_bias,
            expert_map,
            correction_bias,
        },
        meta_n,
    )?;
    layer
        .validate()
        .map_err(|err| invalid(&s.root, format!("layer '{}': {err}", info.name)))?;
    let (w13_orig, w2_orig) = orig.unwrap_or((None, None));
    Ok(LoadedLayer {
        layer,
        w13_orig,
        w2_orig,
        router,
        warnings,
    })
}

/// Stack Quark/DeepSeek per-expert tensors into `[E, 2I, H]` (rows: gate then up) and
/// `[E, H, I]`. This copies (the experts are separate tensors): the bytes are read from the
/// files into the stacks (no mapped pages), so the peak is one copy of the layer.
fn per_expert(
    s: &Store,
    p: &str,
    e: usize,
    h: usize,
    i: usize,
    w: MxFormat,
) -> Result<(MxTensor, MxTensor), IoError> {
    let (r13, s13) = (w.packed_len(h), h / BLOCK);
    let (r2, s2) = (w.packed_len(i), i / BLOCK);
    let mut d13 = Vec::with_capacity(e * 2 * i * r13);
    let mut c13 = Vec::with_capacity(e * 2 * i * s13);
    let mut d2 = Vec::with_capacity(e * h * r2);
    let mut c2 = Vec::with_capacity(e * h * s2);
    for x in 0..e {
        for (proj, rows, k) in [("gate_proj", i, h), ("up_proj", i, h), ("down_proj", h, i)] {
            let (d, c) = if proj == "down_proj" {
                (&mut d2, &mut c2)
            } else {
                (&mut d13, &mut c13)
            };
            let n = format!("{p}{x}.{proj}.weight");
            let sn = format!("{n}_scale");
            let f = s.file(&n)?;
            let t = f.mx_pair(&n, &sn, w)?;
            if t.shape != [rows, k] {
                return Err(IoError::Shape {
                    path: f.path.clone(),
                    tensor: n,
                    expected: format!("logical [{rows}, {k}] like expert 0"),
                    got: t.shape.clone(),
                });
            }
            // `t` only checked the shapes (its mapped bytes were not touched): read the bytes
            // from the file straight into the stacks.
            drop(t);
            f.append_to(&n, d)?;
            s.file(&sn)?.append_to(&sn, c)?;
        }
    }
    let mk = |shape: Vec<usize>, d: Vec<u8>, c: Vec<u8>| {
        MxTensor::new(w, shape, Bytes::from(d), Bytes::from(c))
            .map_err(|err| invalid(&s.root, format!("{p}*: {err}")))
    };
    Ok((mk(vec![e, 2 * i, h], d13, c13)?, mk(vec![e, h, i], d2, c2)?))
}
