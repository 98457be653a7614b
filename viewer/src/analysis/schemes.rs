//! The scheme view's data: the layer output error of the layer as stored and of the five OCP MX
//! schemes (the same unquantized weights re-quantized) against an f64 forward of the
//! unquantized weights, on the same tokens.

use super::{out_err, rel, Dataset, LayerRun, LAYER_RUN};
use mxmoe::format::{MxFormat, MxTensor, ScaleMode};
use mxmoe::moe::reference::swiglu_oai;
use mxmoe::moe::{forward, Activation, MoeConfig, MoeLayer, MoeOptions, MoeWeights, Routing};
use mxmoe::scheme::Scheme;
use rayon::prelude::*;
use std::time::Instant;

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The unquantized layer run in f64 with no activation QDQ: the reference every scheme's output
/// is measured against. `w13` `[E, 2I, H]`, `w2` `[E, H, I]` f32.
pub fn reference_forward(
    layer: &MoeLayer,
    w13: &[f32],
    w2: &[f32],
    hidden: &[f32],
    routing: &Routing,
) -> Vec<f64> {
    let (h, i, k) = (layer.config.hidden, layer.config.inter, routing.top_k);
    let m = routing.tokens();
    let on_input = layer.config.router.apply_router_weight_on_input;
    let dot = |a: &[f32], b: &[f64]| -> f64 { a.iter().zip(b).map(|(&x, &y)| x as f64 * y).sum() };
    let mut out = vec![0f64; m * h];
    out.par_chunks_mut(h).enumerate().for_each(|(tok, acc)| {
        let x: Vec<f64> = hidden[tok * h..(tok + 1) * h]
            .iter()
            .map(|&v| v as f64)
            .collect();
        for j in 0..k {
            let a = tok * k + j;
            let Some(e) = layer.local_id(routing.topk_ids[a] as usize) else {
                continue;
            };
            let w = routing.topk_weights[a] as f64;
            let g1: Vec<f64> = (0..2 * i)
                .map(|r| {
                    let base = (e * 2 * i + r) * h;
                    let b = layer
                        .weights
                        .w13_bias
                        .as_ref()
                        .map_or(0.0, |b| b[e * 2 * i + r] as f64);
                    let v = dot(&w13[base..base + h], &x) + b;
                    if on_input {
                        v * w
                    } else {
                        v
                    }
                })
                .collect();
            let act: Vec<f64> = (0..i)
                .map(|jj| match layer.config.activation {
                    Activation::Silu => silu(g1[jj]) * g1[i + jj],
                    Activation::SwigluOai => swiglu_oai(g1[2 * jj], g1[2 * jj + 1]),
                })
                .collect();
            for (r, o) in acc.iter_mut().enumerate() {
                let base = (e * h + r) * i;
                let b = layer
                    .weights
                    .w2_bias
                    .as_ref()
                    .map_or(0.0, |b| b[e * h + r] as f64);
                let v = dot(&w2[base..base + i], &act) + b;
                *o += if on_input { v } else { v * w };
            }
        }
    });
    out
}

#[derive(Clone, Debug)]
pub struct SchemeRow {
    /// Scheme name, or "as stored (<scheme>)" for the layer's own weights.
    pub label: String,
    pub scheme: Scheme,
    pub stored: bool,
    /// Relative L2 error of the layer output vs the f64 reference.
    pub rel_l2: f64,
    pub max_abs: f64,
    /// Relative L2 error of the quantized weights (w13 and w2 together).
    pub weight_rel: f64,
    /// Seconds the forward pass took (CPU reference, f64 accumulation).
    pub seconds: f64,
}

#[derive(Clone, Debug)]
pub struct SchemeView {
    pub rows: Vec<SchemeRow>,
    /// What the reference is: the unquantized weights, or (without them) the stored weights
    /// dequantized, in which case the weight term of each scheme is a re-quantization error.
    pub reference: String,
    pub weight_scale_mode: ScaleMode,
    pub act_scale_mode: ScaleMode,
}

impl SchemeView {
    pub fn csv(&self) -> String {
        let mut s = format!(
            "# reference: {}\n# weights quantized with scale mode {}, activations QDQ'd with {}\n",
            self.reference, self.weight_scale_mode, self.act_scale_mode
        );
        s += "scheme,stored,output_rel_l2,output_max_abs,weight_rel_l2,forward_seconds\n";
        for r in &self.rows {
            s += &format!(
                "{},{},{:e},{:e},{:e},{:.4}\n",
                r.scheme, r.stored, r.rel_l2, r.max_abs, r.weight_rel, r.seconds
            );
        }
        s
    }
}

fn weight_err(t: &MxTensor, orig: &[f32]) -> (f64, f64) {
    let q = t.dequantize();
    q.par_iter()
        .zip(orig.par_iter())
        .map(|(&a, &b)| {
            let d = a as f64 - b as f64;
            (d * d, b as f64 * b as f64)
        })
        .reduce(|| (0.0, 0.0), |x, y| (x.0 + y.0, x.1 + y.1))
}

/// The most f32 weight bytes the scheme comparison materializes (2 GiB).
pub const SCHEME_F32_LIMIT: usize = 2 << 30;

/// What the scheme comparison can reuse across token batches of the same layer: the weights
/// quantized per weight format, and their errors. Keep one per layer; start a new one when the
/// layer changes.
#[derive(Default)]
pub struct SchemeCache {
    quant: Vec<(MxFormat, MxTensor, MxTensor)>,
    werr: Vec<Werr>,
}

type Werr = ((MxFormat, bool), ((f64, f64), (f64, f64)));

/// Compare the five OCP MX schemes (plus the layer as stored) on the same tokens. The stored
/// layer's row is the shared forward `run` (no forward of its own); each OCP scheme runs one
/// forward of its re-quantized weights with the same options. `progress` is told the fraction
/// done after each scheme; returning `false` from it cancels (returns `None`).
pub fn scheme_view(
    d: &Dataset,
    run: &LayerRun,
    cache: &mut SchemeCache,
    mut progress: impl FnMut(f32) -> bool,
) -> Option<Result<SchemeView, String>> {
    let l = &d.layer;
    let routing = &run.routing;
    // The comparison holds the layer's weights in f32 (and one re-quantized copy per weight
    // format): refuse layers where that would not fit, instead of exhausting memory.
    let f32_bytes = (l.weights.w13.numel() + l.weights.w2.numel()) * 4;
    if f32_bytes > SCHEME_F32_LIMIT {
        return Some(Err(format!(
            "not computed for this layer: the scheme comparison holds the weights in f32, \
             {:.1} GiB here, over the viewer's limit of {:.0} GiB (the other views work on \
             the packed weights; `mxmoe bench` compares schemes on real shapes)",
            f32_bytes as f64 / (1u64 << 30) as f64,
            SCHEME_F32_LIMIT as f64 / (1u64 << 30) as f64
        )));
    }
    let (w13, w2, reference) = match (&d.w13_orig, &d.w2_orig) {
        (Some(a), Some(b)) => (
            std::borrow::Cow::Borrowed(a.as_slice()),
            std::borrow::Cow::Borrowed(b.as_slice()),
            "f64 forward of the unquantized weights, no activation QDQ".to_string(),
        ),
        _ => (
            std::borrow::Cow::Owned(l.weights.w13.dequantize()),
            std::borrow::Cow::Owned(l.weights.w2.dequantize()),
            format!(
                "f64 forward of the stored {} weights dequantized (no unquantized weights in \
                 the file), no activation QDQ",
                l.config.scheme.weight
            ),
        ),
    };
    let refy = reference_forward(l, &w13, &w2, &d.hidden, routing);
    let wmode = ScaleMode::Even;
    // The shared forward's options, without its taps.
    let opts = MoeOptions {
        taps: false,
        ..LAYER_RUN
    };
    let mut rows = Vec::new();
    let n = Scheme::OCP_MX.len() + 1;
    // Weight error per (format, stored): schemes sharing a weight format share it.
    let werr = std::cell::RefCell::new(std::mem::take(&mut cache.werr));
    // One row: a forward's output (and its seconds) against the reference, and the weights'
    // error. The stored layer's row takes the shared forward (`run`); the others run their own.
    let row =
        |layer: &MoeLayer, y: &[f32], seconds: f64, label: String, stored: bool| -> SchemeRow {
            let (rel_l2, max_abs) = out_err(y, &refy);
            let key = (layer.weights.w13.format, stored);
            let cached = werr.borrow().iter().find(|c| c.0 == key).map(|c| c.1);
            let (a, b) = match cached {
                Some(ab) => ab,
                None => {
                    let ab = (
                        weight_err(&layer.weights.w13, &w13),
                        weight_err(&layer.weights.w2, &w2),
                    );
                    werr.borrow_mut().push((key, ab));
                    ab
                }
            };
            SchemeRow {
                label,
                scheme: layer.config.scheme,
                stored,
                rel_l2,
                max_abs,
                weight_rel: rel(a.0 + b.0, a.1 + b.1),
                seconds,
            }
        };
    let forward_row = |layer: &MoeLayer, label: String| -> Result<SchemeRow, String> {
        let t0 = Instant::now();
        let y = forward(layer, &d.hidden, &d.logits, opts).map_err(|e| e.to_string())?;
        Ok(row(
            layer,
            &y.output,
            t0.elapsed().as_secs_f64(),
            label,
            false,
        ))
    };
    rows.push(row(
        l,
        &run.output,
        run.seconds,
        format!("as stored ({})", l.config.scheme),
        true,
    ));
    if !progress(1.0 / n as f32) {
        return None;
    }
    let el = l.local_experts();
    // Schemes that share a weight format share its quantized weights (3 formats for 5 schemes).
    let quant = &mut cache.quant;
    for (si, &scheme) in Scheme::OCP_MX.iter().enumerate() {
        let f = scheme.weight;
        if !quant.iter().any(|c| c.0 == f) {
            let q13 =
                MxTensor::quantize(f, wmode, &w13, &[el, 2 * l.config.inter, l.config.hidden]);
            let q2 = MxTensor::quantize(f, wmode, &w2, &[el, l.config.hidden, l.config.inter]);
            match (q13, q2) {
                (Ok(a), Ok(b)) => quant.push((f, a, b)),
                (Err(e), _) | (_, Err(e)) => return Some(Err(e.to_string())),
            }
        }
        let (_, q13, q2) = quant.iter().find(|c| c.0 == f).expect("cached above");
        let layer = MoeLayer {
            config: MoeConfig {
                scheme,
                ..l.config.clone()
            },
            weights: MoeWeights {
                w13: q13.clone(),
                w2: q2.clone(),
                w13_bias: l.weights.w13_bias.clone(),
                w2_bias: l.weights.w2_bias.clone(),
                e_score_correction_bias: l.weights.e_score_correction_bias.clone(),
                expert_map: l.weights.expert_map.clone(),
            },
        };
        match forward_row(&layer, scheme.name()) {
            Ok(r) => rows.push(r),
            Err(e) => return Some(Err(e)),
        }
        if !progress((si + 2) as f32 / n as f32) {
            return None;
        }
    }
    cache.werr = werr.into_inner();
    Some(Ok(SchemeView {
        rows,
        reference,
        weight_scale_mode: wmode,
        act_scale_mode: l.config.act_scale_mode,
    }))
}
