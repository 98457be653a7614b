//! Layer bundles (vLLM/Quark names, routing keys as metadata): `save_layer`, `save_loaded`;
//! `load_layer` reads a bundle or any checkpoint `super::model` opens (`super::conventions`
//! knows the names).

use super::model::{load_layer_with, LayerQuery};
use super::mx::mx_out;
use super::{save, IoError, OutTensor, StFile};
use crate::moe::{MoeLayer, RouterConfig, RouterWeights, Scoring};
use std::collections::HashMap;
use std::path::Path;

/// A loaded layer, with its unquantized weights when the file carries them
/// (`w13_weight_orig` `[E, 2I, H]`, `w2_weight_orig` `[E, H, I]`, any float dtype).
#[derive(Clone, Debug)]
pub struct LoadedLayer {
    pub layer: MoeLayer,
    pub w13_orig: Option<Vec<f32>>,
    pub w2_orig: Option<Vec<f32>>,
    /// The model's router weights, when the checkpoint has them (a batch may then hold only
    /// `hidden_states`: [`super::batch::load_batch_for`]).
    pub router: Option<RouterWeights>,
    /// Legal but almost certainly broken data (NaN weight blocks, non-finite biases): commands
    /// print these and record them in their results (`super::validate`).
    pub warnings: Vec<super::LayerWarning>,
}

/// Save a layer bundle with the vLLM/Quark names and the routing keys as metadata.
pub fn save_layer(
    path: &Path,
    l: &MoeLayer,
    orig: Option<(&[f32], &[f32])>,
) -> Result<(), IoError> {
    save_layer_with(path, l, orig, Vec::new())
}

fn save_layer_with(
    path: &Path,
    l: &MoeLayer,
    orig: Option<(&[f32], &[f32])>,
    extra: Vec<OutTensor>,
) -> Result<(), IoError> {
    let (e, h, i) = (l.local_experts(), l.config.hidden, l.config.inter);
    let mut t: Vec<OutTensor> = extra;
    t.extend(mx_out("w13_weight", &l.weights.w13));
    t.extend(mx_out("w2_weight", &l.weights.w2));
    if let Some(b) = &l.weights.w13_bias {
        t.push(OutTensor::f32("w13_bias", vec![e, 2 * i], b));
    }
    if let Some(b) = &l.weights.w2_bias {
        t.push(OutTensor::f32("w2_bias", vec![e, h], b));
    }
    if let Some(b) = &l.weights.e_score_correction_bias {
        t.push(OutTensor::f32(
            "e_score_correction_bias",
            vec![l.config.n_experts],
            b,
        ));
    }
    if let Some(m) = &l.weights.expert_map {
        t.push(OutTensor::i32("expert_map", vec![l.config.n_experts], m));
    }
    if let Some((a, b)) = orig {
        t.push(OutTensor::f32("w13_weight_orig", vec![e, 2 * i, h], a));
        t.push(OutTensor::f32("w2_weight_orig", vec![e, h, i], b));
    }
    let r = &l.config.router;
    let mut meta: HashMap<String, String> = [
        ("scheme", l.config.scheme.name()),
        ("activation", l.config.activation.name().to_string()),
        ("top_k", r.top_k.to_string()),
        ("renormalize", r.renormalize.to_string()),
        ("scale_mode", l.config.act_scale_mode.name().to_string()),
        ("scoring", r.scoring.name().to_string()),
        ("routed_scaling_factor", r.routed_scaling_factor.to_string()),
        (
            "apply_router_weight_on_input",
            r.apply_router_weight_on_input.to_string(),
        ),
        ("n_experts", l.config.n_experts.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let (Some(g), Some(tg)) = (r.n_group, r.topk_group) {
        meta.insert("n_group".into(), g.to_string());
        meta.insert("topk_group".into(), tg.to_string());
    }
    save(path, &t, meta)
}

fn parse_bool(f: &StFile, key: &str) -> Result<Option<bool>, IoError> {
    match f.meta(key).map(|s| s.trim().to_ascii_lowercase()) {
        None => Ok(None),
        Some(v) if v == "true" || v == "1" => Ok(Some(true)),
        Some(v) if v == "false" || v == "0" => Ok(Some(false)),
        Some(v) => Err(IoError::Meta {
            path: f.path.clone(),
            key: key.into(),
            msg: format!("'{v}' is not true/false"),
        }),
    }
}

/// Load the one MoE layer of a file or model directory (any naming convention, GGUF too);
/// [`load_layer_with`] picks one of several.
pub fn load_layer(path: &Path) -> Result<LoadedLayer, IoError> {
    load_layer_with(path, &LayerQuery::default())
}

/// Save a loaded layer as a bundle, with its router weights (`router_weight` `[E, H]`,
/// `router_bias` `[E]`) and unquantized weights when it has them (`mxmoe extract`).
pub fn save_loaded(path: &Path, l: &LoadedLayer) -> Result<(), IoError> {
    let orig = match (&l.w13_orig, &l.w2_orig) {
        (Some(a), Some(b)) => Some((a.as_slice(), b.as_slice())),
        _ => None,
    };
    let mut extra = Vec::new();
    if let Some(r) = &l.router {
        extra.push(OutTensor::f32(
            "router_weight",
            vec![r.n_experts, r.hidden],
            &r.weight,
        ));
        if let Some(b) = &r.bias {
            extra.push(OutTensor::f32("router_bias", vec![r.n_experts], b));
        }
    }
    save_layer_with(path, &l.layer, orig, extra)
}

pub(crate) fn router_from_meta(
    f: &StFile,
    defaults: RouterConfig,
) -> Result<RouterConfig, IoError> {
    let mut r = defaults;
    if let Some(k) = f.meta_parse::<usize>("top_k")? {
        r.top_k = k;
    }
    if let Some(b) = parse_bool(f, "renormalize")? {
        r.renormalize = b;
    }
    if let Some(s) = f.meta_parse::<Scoring>("scoring")? {
        r.scoring = s;
    }
    r.n_group = f.meta_parse::<usize>("n_group")?.or(r.n_group);
    r.topk_group = f.meta_parse::<usize>("topk_group")?.or(r.topk_group);
    if let Some(x) = f.meta_parse::<f32>("routed_scaling_factor")? {
        r.routed_scaling_factor = x;
    }
    if let Some(b) = parse_bool(f, "apply_router_weight_on_input")? {
        r.apply_router_weight_on_input = b;
    }
    Ok(r)
}
