//! Layer bundles (vLLM/Quark names, routing keys as metadata) and `load_layer`, which
//! dispatches to the bundle or the gpt-oss reader.

use super::gptoss::{gptoss_prefixes, load_gptoss};
use super::mx::mx_out;
use super::validate::{check_layer, LayerNames};
use super::{save, IoError, OutTensor, StFile};
use crate::format::ScaleMode;
use crate::moe::{Activation, MoeConfig, MoeLayer, MoeWeights, RouterConfig, Scoring};
use crate::scheme::Scheme;
use std::collections::HashMap;
use std::path::Path;

/// A loaded layer, with its unquantized weights when the file carries them
/// (`w13_weight_orig` `[E, 2I, H]`, `w2_weight_orig` `[E, H, I]`, any float dtype).
#[derive(Clone, Debug)]
pub struct LoadedLayer {
    pub layer: MoeLayer,
    pub w13_orig: Option<Vec<f32>>,
    pub w2_orig: Option<Vec<f32>>,
    /// Legal but almost certainly broken data (NaN weight blocks, non-finite biases): commands
    /// print these and record them in their results (`io::validate`).
    pub warnings: Vec<super::LayerWarning>,
}

/// Save a layer bundle with the vLLM/Quark names and the routing keys as metadata.
pub fn save_layer(
    path: &Path,
    l: &MoeLayer,
    orig: Option<(&[f32], &[f32])>,
) -> Result<(), IoError> {
    let (e, h, i) = (l.local_experts(), l.config.hidden, l.config.inter);
    let mut t: Vec<OutTensor> = Vec::new();
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

/// Load a layer bundle (vLLM/Quark names) or a gpt-oss-style checkpoint holding one layer.
pub fn load_layer(path: &Path) -> Result<LoadedLayer, IoError> {
    let f = StFile::open(path)?;
    if f.has("w13_weight") {
        return load_bundle(&f);
    }
    let pre = gptoss_prefixes(&f);
    match pre.len() {
        0 => Err(IoError::Missing {
            path: f.path.clone(),
            tensor: "w13_weight".into(),
            hint: " (neither a layer bundle with w13_weight/w2_weight nor a gpt-oss checkpoint with *gate_up_proj_blocks)".into(),
        }),
        1 => load_gptoss(&f, &pre[0].0, pre[0].1),
        _ => Err(IoError::Invalid {
            path: f.path.clone(),
            msg: format!(
                "the file holds {} gpt-oss MoE layers ({}); extract one layer first",
                pre.len(),
                pre.iter().map(|p| p.0.as_str()).collect::<Vec<_>>().join(", ")
            ),
        }),
    }
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

pub(crate) fn opt_floats(
    f: &StFile,
    name: &str,
    want: &[usize],
) -> Result<Option<Vec<f32>>, IoError> {
    if !f.has(name) {
        return Ok(None);
    }
    let (v, s) = f.floats(name)?;
    if s != want {
        return Err(f.shape_err(name, format!("{want:?}"), s));
    }
    Ok(Some(v))
}

pub(crate) fn finish(
    f: &StFile,
    layer: MoeLayer,
    w13_orig: Option<Vec<f32>>,
    w2_orig: Option<Vec<f32>>,
) -> Result<LoadedLayer, IoError> {
    finish_named(f, layer, w13_orig, w2_orig, &LayerNames::BUNDLE)
}

/// [`finish`] for a file whose tensors have other names (warnings name the file's tensors).
pub(crate) fn finish_named(
    f: &StFile,
    layer: MoeLayer,
    w13_orig: Option<Vec<f32>>,
    w2_orig: Option<Vec<f32>>,
    names: &LayerNames<'_>,
) -> Result<LoadedLayer, IoError> {
    // The file-level checks first: their messages name the file's keys and tensors.
    let warnings = check_layer(f, &layer, names)?;
    layer.validate().map_err(|e| IoError::Invalid {
        path: f.path.clone(),
        msg: e.to_string(),
    })?;
    Ok(LoadedLayer {
        layer,
        w13_orig,
        w2_orig,
        warnings,
    })
}

fn load_bundle(f: &StFile) -> Result<LoadedLayer, IoError> {
    let scheme: Scheme = f
        .meta_parse::<Scheme>("scheme")?
        .ok_or_else(|| IoError::Meta {
            path: f.path.clone(),
            key: "scheme".into(),
            msg: "missing (e.g. w_mxfp4_a_mxfp4)".into(),
        })?;
    let w13 = f.mx("w13_weight", scheme.weight)?;
    let w2 = f.mx("w2_weight", scheme.weight)?;
    if w13.shape.len() != 3 || w13.shape[1] % 2 != 0 {
        return Err(f.shape_err(
            "w13_weight",
            "[E, 2I, packed(H)] (3-D, even row count)".into(),
            f.shape("w13_weight")?,
        ));
    }
    let (e, i2, h) = (w13.shape[0], w13.shape[1], w13.shape[2]);
    let i = i2 / 2;
    if w2.shape != [e, h, i] {
        return Err(f.shape_err(
            "w2_weight",
            format!(
                "logical [E = {e}, H = {h}, I = {i}] (packed [{e}, {h}, {}])",
                scheme.weight.packed_len(i)
            ),
            w2.shape.clone(),
        ));
    }
    let expert_map = if f.has("expert_map") {
        let (m, s) = f.ints("expert_map")?;
        if s.len() != 1 {
            return Err(f.shape_err("expert_map", "[n_experts]".into(), s));
        }
        Some(
            m.into_iter()
                .map(|v| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
                .collect::<Vec<i32>>(),
        )
    } else {
        None
    };
    let n_experts = match (&expert_map, f.meta_parse::<usize>("n_experts")?) {
        (Some(m), _) => m.len(),
        (None, Some(n)) => n,
        (None, None) => e,
    };
    let activation = f
        .meta_parse::<Activation>("activation")?
        .unwrap_or_default();
    let router = router_from_meta(f, RouterConfig::default())?;
    let act_scale_mode = f.meta_parse::<ScaleMode>("scale_mode")?.unwrap_or_default();
    let layer = MoeLayer {
        config: MoeConfig {
            scheme,
            activation,
            router,
            act_scale_mode,
            n_experts,
            hidden: h,
            inter: i,
            local_experts: w13.shape[0],
        },
        weights: MoeWeights {
            w13,
            w2,
            w13_bias: opt_floats(f, "w13_bias", &[e, 2 * i])?,
            w2_bias: opt_floats(f, "w2_bias", &[e, h])?,
            e_score_correction_bias: opt_floats(f, "e_score_correction_bias", &[n_experts])?,
            expert_map,
        },
    };
    let w13_orig = opt_floats(f, "w13_weight_orig", &[e, 2 * i, h])?;
    let w2_orig = opt_floats(f, "w2_weight_orig", &[e, h, i])?;
    finish(f, layer, w13_orig, w2_orig)
}
