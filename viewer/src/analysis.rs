//! What the views show, computed off the UI thread: routing statistics, quantization error of
//! weights and of both activation QDQ points under every scale mode, the per-scheme output error
//! against an f64 reference, and the CPU vs GPU output difference.
//!
//! Everything here is plain data plus pure functions over a [`Dataset`], so the worker thread,
//! the snapshot tests and the CSV export share one definition. Error metrics:
//! * relative error of a set of values = `||q - x||_2 / ||x||_2` (0 when `x` is all zero);
//! * an element is *saturated* when `|x| / 2^scale > max_normal` of the format: the scale rule
//!   left it outside the element range, so it was clipped to `±max_normal`.

use mxmoe::backend::{Backend, BackendKind};
use mxmoe::format::{
    decode_elem_f64, dequantize_block, e8m0_to_f32, quantize_block, MxFormat, MxTensor, ScaleMode,
    BLOCK, SCALE_NAN,
};
use mxmoe::moe::reference::{assignments_by_expert, swiglu_oai};
use mxmoe::moe::routing::scores;
use mxmoe::moe::{
    forward, route, Accumulate, Activation, MoeConfig, MoeLayer, MoeOptions, MoeWeights, Routing,
    Scoring,
};
use mxmoe::scheme::Scheme;
use rayon::prelude::*;
use std::time::Instant;

/// A layer, its optional unquantized weights, and a token batch: what every view starts from.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Where it came from ("synthetic ..." or the file paths), for titles and CSV headers.
    pub source: String,
    pub layer: MoeLayer,
    /// `[E, 2I, H]` unquantized weights, when known (synthetic layers, bundles with `*_orig`).
    pub w13_orig: Option<Vec<f32>>,
    /// `[E, H, I]` unquantized weights, when known.
    pub w2_orig: Option<Vec<f32>>,
    /// `[M, H]`.
    pub hidden: Vec<f32>,
    /// `[M, n_experts]`.
    pub logits: Vec<f32>,
    pub m: usize,
}

impl Dataset {
    /// Check that the batch fits the layer (a bad file must become a message, never a panic).
    pub fn validate(&self) -> Result<(), String> {
        self.layer.validate().map_err(|e| e.to_string())?;
        let (h, e, i) = (
            self.layer.config.hidden,
            self.layer.config.n_experts,
            self.layer.config.inter,
        );
        if self.m == 0 {
            return Err("the token batch has no tokens".into());
        }
        if self.hidden.len() != self.m * h {
            return Err(format!(
                "hidden_states has {} values, expected [M = {}, H = {h}] (the layer's hidden size)",
                self.hidden.len(),
                self.m
            ));
        }
        if self.logits.len() != self.m * e {
            return Err(format!(
                "router_logits has {} values, expected [M = {}, E = {e}] (the layer's experts)",
                self.logits.len(),
                self.m
            ));
        }
        let el = self.layer.local_experts();
        if let Some(w) = &self.w13_orig {
            if w.len() != el * 2 * i * h {
                return Err(format!(
                    "w13_weight_orig has {} values, expected [{el}, {}, {h}]",
                    w.len(),
                    2 * i
                ));
            }
        }
        if let Some(w) = &self.w2_orig {
            if w.len() != el * h * i {
                return Err(format!(
                    "w2_weight_orig has {} values, expected [{el}, {h}, {i}]",
                    w.len()
                ));
            }
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        let l = &self.layer;
        format!(
            "{} | {} {} | E={} H={} I={} top-k={} | M={} tokens",
            self.source,
            l.config.scheme,
            l.config.activation,
            l.config.n_experts,
            l.config.hidden,
            l.config.inter,
            l.config.router.top_k,
            self.m
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Routing

/// Router probabilities, the chosen top-k and the expert load.
#[derive(Clone, Debug)]
pub struct RoutingView {
    pub m: usize,
    pub n_experts: usize,
    pub top_k: usize,
    pub scoring: Scoring,
    /// `[M, E]` per-expert scores (softmax probabilities or sigmoids; for `topk_softmax`, the
    /// full softmax, for display).
    pub scores: Vec<f32>,
    pub routing: Routing,
    /// Tokens routed to each expert (each of a token's k slots counts once).
    pub load: Vec<usize>,
    pub max_over_mean: f64,
    /// Coefficient of variation of the load: std / mean.
    pub cv: f64,
    /// Experts that got no token.
    pub empty: Vec<usize>,
}

impl RoutingView {
    /// Whether expert `e` is among token `t`'s top-k, and at which slot.
    pub fn slot_of(&self, t: usize, e: usize) -> Option<usize> {
        let k = self.top_k;
        self.routing.topk_ids[t * k..(t + 1) * k]
            .iter()
            .position(|&id| id as usize == e)
    }

    pub fn csv(&self) -> String {
        let mut s = String::from("token,expert,score,selected_slot,router_weight\n");
        for t in 0..self.m {
            for e in 0..self.n_experts {
                let (slot, w) = match self.slot_of(t, e) {
                    Some(j) => (
                        j.to_string(),
                        format!("{:e}", self.routing.topk_weights[t * self.top_k + j]),
                    ),
                    None => (String::new(), String::new()),
                };
                s += &format!(
                    "{t},{e},{:e},{slot},{w}\n",
                    self.scores[t * self.n_experts + e]
                );
            }
        }
        s += "\n# expert load\nexpert,tokens\n";
        for (e, n) in self.load.iter().enumerate() {
            s += &format!("{e},{n}\n");
        }
        s += &format!(
            "# max/mean,{:.6}\n# cv,{:.6}\n# empty experts,{}\n",
            self.max_over_mean,
            self.cv,
            self.empty.len()
        );
        s
    }
}

pub fn routing_view(d: &Dataset) -> Result<RoutingView, String> {
    let l = &d.layer;
    let e = l.config.n_experts;
    let routing = route(
        &l.config.router,
        &d.logits,
        e,
        l.weights.e_score_correction_bias.as_deref(),
    )
    .map_err(|err| err.to_string())?;
    let scores: Vec<f32> = d
        .logits
        .par_chunks(e)
        .flat_map_iter(|row| scores(l.config.router.scoring, row))
        .collect();
    let mut load = vec![0usize; e];
    for &id in &routing.topk_ids {
        load[id as usize] += 1;
    }
    let mean = load.iter().sum::<usize>() as f64 / e as f64;
    let max = *load.iter().max().unwrap_or(&0) as f64;
    let var = load.iter().map(|&n| (n as f64 - mean).powi(2)).sum::<f64>() / e as f64;
    Ok(RoutingView {
        m: d.m,
        n_experts: e,
        top_k: l.config.router.top_k,
        scoring: l.config.router.scoring,
        scores,
        load: load.clone(),
        max_over_mean: if mean > 0.0 { max / mean } else { 0.0 },
        cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
        empty: (0..e).filter(|&x| load[x] == 0).collect(),
        routing,
    })
}

// ---------------------------------------------------------------------------------------------
// Quantization statistics of one tensor under one scale rule

/// Which scale rule produced a [`QuantStats`]: one of the four modes applied to the unquantized
/// values, or the scales stored in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Mode(ScaleMode),
    Stored,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::Mode(m) => m.name(),
            Rule::Stored => "stored",
        }
    }
}

/// Error statistics of one tensor (`groups` x `rows_per_group` rows of `k` values) quantized with
/// one format under one rule.
#[derive(Clone, Debug)]
pub struct QuantStats {
    pub rule: Rule,
    pub format: MxFormat,
    /// Row length (the block axis).
    pub k: usize,
    pub rows_per_group: usize,
    pub n_elems: usize,
    /// Relative L2 error over the whole tensor.
    pub rel_l2: f64,
    /// Largest absolute element error.
    pub max_abs: f64,
    /// Share of saturated (clipped) elements.
    pub saturated: f64,
    pub n_saturated: u64,
    /// Blocks holding NaN/Inf (scale byte 0xFF): left out of the error sums.
    pub nonfinite_blocks: u64,
    /// Blocks per E8M0 byte (index = byte; exponent = byte - 127).
    pub scale_hist: Vec<u64>,
    /// Relative error per group (per expert for weights, per token / token-expert for activations).
    pub group_rel: Vec<f32>,
    /// Relative error per 32-block, `[groups * rows_per_group, k / 32]` row-major.
    pub block_rel: Vec<f32>,
}

impl QuantStats {
    pub fn groups(&self) -> usize {
        self.group_rel.len()
    }
    pub fn blocks_per_row(&self) -> usize {
        self.k / BLOCK
    }
    /// The exponent range that holds any block, for the histogram's axis.
    pub fn exp_range(&self) -> Option<(i32, i32)> {
        let lo = self.scale_hist[..255].iter().position(|&n| n > 0)?;
        let hi = self.scale_hist[..255].iter().rposition(|&n| n > 0)?;
        Some((lo as i32 - 127, hi as i32 - 127))
    }
}

#[derive(Default)]
struct Part {
    nonfinite: u64,
    err2: f64,
    x2: f64,
    max_abs: f64,
    sat: u64,
    hist: Vec<u64>,
    block_rel: Vec<f32>,
}

impl Part {
    fn add_block(&mut self, fmt_max: f64, x: &[f32], q: &[f32], byte: u8) {
        if byte == SCALE_NAN {
            // A block holding NaN/Inf: it has no error to speak of; shown as NaN (magenta).
            self.nonfinite += 1;
            self.block_rel.push(f32::NAN);
            return;
        }
        let scale = e8m0_to_f32(byte) as f64;
        let (mut e2, mut x2) = (0f64, 0f64);
        for (&a, &b) in x.iter().zip(q) {
            let d = b as f64 - a as f64;
            e2 += d * d;
            x2 += a as f64 * a as f64;
            self.max_abs = self.max_abs.max(d.abs());
            if (a as f64).abs() > fmt_max * scale {
                self.sat += 1;
            }
        }
        self.err2 += e2;
        self.x2 += x2;
        self.hist[byte as usize] += 1;
        self.block_rel.push(if x2 > 0.0 {
            (e2 / x2).sqrt() as f32
        } else {
            0.0
        });
    }
}

fn rel(err2: f64, x2: f64) -> f64 {
    if x2 > 0.0 {
        (err2 / x2).sqrt()
    } else {
        0.0
    }
}

/// Quantize `x` (`[groups * rows_per_group, k]`) under `rule` and measure the error. For
/// `Rule::Stored`, `stored` holds the file's quantized tensor of the same shape.
pub fn quant_stats(
    format: MxFormat,
    rule: Rule,
    x: &[f32],
    k: usize,
    rows_per_group: usize,
    stored: Option<&MxTensor>,
) -> QuantStats {
    let group_len = k * rows_per_group;
    let fmt_max = format.spec().max_normal;
    let mut lut = [0f32; 256];
    for (c, v) in lut
        .iter_mut()
        .enumerate()
        .take(format.spec().n_codes() as usize)
    {
        *v = decode_elem_f64(format, c as u8) as f32;
    }
    let parts: Vec<Part> = x
        .par_chunks(group_len)
        .enumerate()
        .map(|(g, xs)| {
            let mut p = Part {
                hist: vec![0; 256],
                block_rel: Vec::with_capacity(xs.len() / BLOCK),
                ..Default::default()
            };
            let mut codes = [0u8; BLOCK];
            let mut q = [0f32; BLOCK];
            match (rule, stored) {
                (Rule::Stored, Some(t)) => {
                    let mut deq = vec![0f32; xs.len()];
                    t.dequantize_rows(g * rows_per_group, &mut deq);
                    let sb = k / BLOCK;
                    for (bi, (xb, qb)) in xs
                        .chunks_exact(BLOCK)
                        .zip(deq.chunks_exact(BLOCK))
                        .enumerate()
                    {
                        let byte = t.scales[g * rows_per_group * sb + bi];
                        p.add_block(fmt_max, xb, qb, byte);
                    }
                }
                (Rule::Mode(_), _) | (Rule::Stored, None) => {
                    let mode = match rule {
                        Rule::Mode(m) => m,
                        Rule::Stored => ScaleMode::Even,
                    };
                    for xb in xs.chunks_exact(BLOCK) {
                        let byte = quantize_block(format, mode, xb, &mut codes);
                        // code value x 2^scale, exact in f32 (as MxTensor::dequantize_rows).
                        let sc = e8m0_to_f32(byte);
                        for (o, &c) in q.iter_mut().zip(&codes) {
                            *o = lut[c as usize] * sc;
                        }
                        p.add_block(fmt_max, xb, &q, byte);
                    }
                }
            }
            p
        })
        .collect();
    let mut hist = vec![0u64; 256];
    let (mut err2, mut x2, mut max_abs, mut sat, mut nonfinite) = (0f64, 0f64, 0f64, 0u64, 0u64);
    let mut group_rel = Vec::with_capacity(parts.len());
    let mut block_rel = Vec::with_capacity(x.len() / BLOCK);
    for p in parts {
        err2 += p.err2;
        x2 += p.x2;
        max_abs = max_abs.max(p.max_abs);
        sat += p.sat;
        nonfinite += p.nonfinite;
        for (h, n) in hist.iter_mut().zip(&p.hist) {
            *h += n;
        }
        group_rel.push(rel(p.err2, p.x2) as f32);
        block_rel.extend_from_slice(&p.block_rel);
    }
    QuantStats {
        rule,
        format,
        k,
        rows_per_group,
        n_elems: x.len(),
        rel_l2: rel(err2, x2),
        max_abs,
        saturated: sat as f64 / x.len().max(1) as f64,
        n_saturated: sat,
        nonfinite_blocks: nonfinite,
        scale_hist: hist,
        group_rel,
        block_rel,
    }
}

/// The same tensor under several rules, side by side.
#[derive(Clone, Debug)]
pub struct TensorStats {
    /// `w13`, `w2`, `input`, `intermediate`.
    pub name: &'static str,
    /// What a group is ("expert", "token", "token-expert slot").
    pub group_name: &'static str,
    pub by_rule: Vec<QuantStats>,
}

impl TensorStats {
    pub fn summary_csv(&self, s: &mut String) {
        for q in &self.by_rule {
            *s += &format!(
                "{},{},{},{:e},{:e},{:e},{}\n",
                self.name,
                q.format.name(),
                q.rule.name(),
                q.rel_l2,
                q.max_abs,
                q.saturated,
                q.n_elems
            );
        }
    }
    pub fn groups_csv(&self, s: &mut String) {
        for q in &self.by_rule {
            for (g, v) in q.group_rel.iter().enumerate() {
                *s += &format!(
                    "{},{},{},{g},{:e}\n",
                    self.name,
                    q.rule.name(),
                    self.group_name,
                    v
                );
            }
        }
    }
    pub fn hist_csv(&self, s: &mut String) {
        for q in &self.by_rule {
            for (b, &n) in q.scale_hist.iter().enumerate() {
                if n > 0 {
                    *s += &format!("{},{},{},{n}\n", self.name, q.rule.name(), b as i32 - 127);
                }
            }
        }
    }
}

const SUMMARY_HEADER: &str = "tensor,format,rule,rel_l2,max_abs,saturated_share,elements\n";

/// Weight quantization error: needs the unquantized weights.
#[derive(Clone, Debug)]
pub struct WeightView {
    pub n_experts: usize,
    pub w13: TensorStats,
    pub w2: TensorStats,
}

impl WeightView {
    pub fn csv(&self) -> String {
        let mut s = String::from(SUMMARY_HEADER);
        self.w13.summary_csv(&mut s);
        self.w2.summary_csv(&mut s);
        s += "\n# per expert\ntensor,rule,group,index,rel_l2\n";
        self.w13.groups_csv(&mut s);
        self.w2.groups_csv(&mut s);
        s += "\n# E8M0 scale exponent histogram\ntensor,rule,exponent,blocks\n";
        self.w13.hist_csv(&mut s);
        self.w2.hist_csv(&mut s);
        s
    }
}

fn all_rules(stored: bool) -> Vec<Rule> {
    let mut r: Vec<Rule> = ScaleMode::ALL.iter().map(|&m| Rule::Mode(m)).collect();
    if stored {
        r.push(Rule::Stored);
    }
    r
}

pub fn weight_view(d: &Dataset) -> Option<WeightView> {
    let (w13o, w2o) = (d.w13_orig.as_ref()?, d.w2_orig.as_ref()?);
    let l = &d.layer;
    let f = l.config.scheme.weight;
    let stats = |name, x: &[f32], k, rows, t: &MxTensor| TensorStats {
        name,
        group_name: "expert",
        by_rule: all_rules(true)
            .into_iter()
            .map(|r| quant_stats(f, r, x, k, rows, Some(t)))
            .collect(),
    };
    Some(WeightView {
        n_experts: l.local_experts(),
        w13: stats(
            "w13",
            w13o,
            l.config.hidden,
            2 * l.config.inter,
            &l.weights.w13,
        ),
        w2: stats("w2", w2o, l.config.inter, l.config.hidden, &l.weights.w2),
    })
}

// ---------------------------------------------------------------------------------------------
// Activations at both QDQ points

/// The activation QDQ error of the token batch at the input and the intermediate QDQ point.
#[derive(Clone, Debug)]
pub struct ActView {
    /// The scheme's activation format, `None` for a weight-only scheme (nothing to show).
    pub format: Option<MxFormat>,
    /// The layer's own activation scale mode (the one the forward pass uses).
    pub layer_mode: ScaleMode,
    /// `[M, H]` under each mode.
    pub input: Option<TensorStats>,
    /// `[M*k, I]` (token-major, slot order) under each mode; the intermediate values are those
    /// the layer computes (input QDQ'd with the layer's own mode, GEMM1 on the stored weights,
    /// activation).
    pub intermediate: Option<TensorStats>,
    pub top_k: usize,
}

impl ActView {
    pub fn csv(&self) -> String {
        let mut s = String::from(SUMMARY_HEADER);
        let ts: Vec<&TensorStats> = self.input.iter().chain(&self.intermediate).collect();
        for t in &ts {
            t.summary_csv(&mut s);
        }
        s += "\n# per token (input) / token-expert slot (intermediate)\ntensor,rule,group,index,rel_l2\n";
        for t in &ts {
            t.groups_csv(&mut s);
        }
        s += "\n# E8M0 scale exponent histogram\ntensor,rule,exponent,blocks\n";
        for t in &ts {
            t.hist_csv(&mut s);
        }
        s
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The intermediate activations `[M*k, I]` (slot order) the layer feeds its second QDQ, computed
/// in f64 from dequantized weights (row by row, so a big layer never sits in f32 memory).
/// Slots routed to experts this layer does not hold stay zero.
pub fn intermediates(layer: &MoeLayer, xq: &[f32], routing: &Routing) -> Vec<f32> {
    let (h, i, k) = (layer.config.hidden, layer.config.inter, routing.top_k);
    let lists = assignments_by_expert(layer, routing);
    let on_input = layer.config.router.apply_router_weight_on_input;
    let per_expert: Vec<(Vec<usize>, Vec<f32>)> = lists
        .par_iter()
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(e, list)| {
            let t = list.len();
            let mut row = vec![0f32; h];
            let mut g1 = vec![0f64; t * 2 * i];
            for r in 0..2 * i {
                layer.weights.w13.dequantize_rows(e * 2 * i + r, &mut row);
                let b = layer
                    .weights
                    .w13_bias
                    .as_ref()
                    .map_or(0.0, |b| b[e * 2 * i + r] as f64);
                for (ti, &a) in list.iter().enumerate() {
                    let tok = a / k;
                    let x = &xq[tok * h..(tok + 1) * h];
                    let mut v: f64 = row.iter().zip(x).map(|(&w, &x)| w as f64 * x as f64).sum();
                    v += b;
                    if on_input {
                        v *= routing.topk_weights[a] as f64;
                    }
                    g1[ti * 2 * i + r] = v;
                }
            }
            let mut out = vec![0f32; t * i];
            for ti in 0..t {
                let g = &g1[ti * 2 * i..(ti + 1) * 2 * i];
                for j in 0..i {
                    out[ti * i + j] = match layer.config.activation {
                        Activation::Silu => silu(g[j]) * g[i + j],
                        Activation::SwigluOai => swiglu_oai(g[2 * j], g[2 * j + 1]),
                    } as f32;
                }
            }
            (list.clone(), out)
        })
        .collect();
    let m = routing.tokens();
    let mut all = vec![0f32; m * k * i];
    for (list, out) in per_expert {
        for (ti, &a) in list.iter().enumerate() {
            all[a * i..(a + 1) * i].copy_from_slice(&out[ti * i..(ti + 1) * i]);
        }
    }
    all
}

pub fn act_view(d: &Dataset, routing: &Routing) -> ActView {
    let l = &d.layer;
    let Some(f) = l.config.scheme.activation else {
        return ActView {
            format: None,
            layer_mode: l.config.act_scale_mode,
            input: None,
            intermediate: None,
            top_k: routing.top_k,
        };
    };
    let rules = all_rules(false);
    let input = TensorStats {
        name: "input",
        group_name: "token",
        by_rule: rules
            .iter()
            .map(|&r| quant_stats(f, r, &d.hidden, l.config.hidden, 1, None))
            .collect(),
    };
    let mut xq = vec![0f32; d.hidden.len()];
    let mut codes = [0u8; BLOCK];
    for (o, x) in xq.chunks_exact_mut(BLOCK).zip(d.hidden.chunks_exact(BLOCK)) {
        let byte = quantize_block(f, l.config.act_scale_mode, x, &mut codes);
        dequantize_block(f, &codes, byte, o);
    }
    let inter = intermediates(l, &xq, routing);
    let intermediate = TensorStats {
        name: "intermediate",
        group_name: "token-expert slot",
        by_rule: rules
            .iter()
            .map(|&r| quant_stats(f, r, &inter, l.config.inter, 1, None))
            .collect(),
    };
    ActView {
        format: Some(f),
        layer_mode: l.config.act_scale_mode,
        input: Some(input),
        intermediate: Some(intermediate),
        top_k: routing.top_k,
    }
}

// ---------------------------------------------------------------------------------------------
// Per-scheme layer output error against an f64 reference

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

fn out_err(y: &[f32], reference: &[f64]) -> (f64, f64) {
    let (mut e2, mut r2, mut mx) = (0f64, 0f64, 0f64);
    for (&a, &b) in y.iter().zip(reference) {
        let d = a as f64 - b;
        e2 += d * d;
        r2 += b * b;
        mx = mx.max(d.abs());
    }
    (rel(e2, r2), mx)
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

/// Compare the five OCP MX schemes (plus the layer as stored) on the same tokens. `progress` is
/// told the fraction done after each scheme; returning `false` from it cancels (returns `None`).
/// What the scheme comparison can reuse across token batches of the same layer: the weights
/// quantized per weight format, and their errors. Keep one per layer; start a new one when the
/// layer changes.
#[derive(Default)]
pub struct SchemeCache {
    quant: Vec<(MxFormat, MxTensor, MxTensor)>,
    werr: Vec<Werr>,
}

type Werr = ((MxFormat, bool), ((f64, f64), (f64, f64)));

pub fn scheme_view(
    d: &Dataset,
    cache: &mut SchemeCache,
    mut progress: impl FnMut(f32) -> bool,
) -> Option<Result<SchemeView, String>> {
    let l = &d.layer;
    let routing = match route(
        &l.config.router,
        &d.logits,
        l.config.n_experts,
        l.weights.e_score_correction_bias.as_deref(),
    ) {
        Ok(r) => r,
        Err(e) => return Some(Err(e.to_string())),
    };
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
    let refy = reference_forward(l, &w13, &w2, &d.hidden, &routing);
    let wmode = ScaleMode::Even;
    let opts = MoeOptions {
        accumulate: Accumulate::F64,
        ..Default::default()
    };
    let mut rows = Vec::new();
    let n = Scheme::OCP_MX.len() + 1;
    // Weight error per (format, stored): schemes sharing a weight format share it.
    let werr = std::cell::RefCell::new(std::mem::take(&mut cache.werr));
    let run = |layer: &MoeLayer, label: String, stored: bool| -> Result<SchemeRow, String> {
        let t0 = Instant::now();
        let y = forward(layer, &d.hidden, &d.logits, opts).map_err(|e| e.to_string())?;
        let seconds = t0.elapsed().as_secs_f64();
        let (rel_l2, max_abs) = out_err(&y.output, &refy);
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
        Ok(SchemeRow {
            label,
            scheme: layer.config.scheme,
            stored,
            rel_l2,
            max_abs,
            weight_rel: rel(a.0 + b.0, a.1 + b.1),
            seconds,
        })
    };
    match run(l, format!("as stored ({})", l.config.scheme), true) {
        Ok(r) => rows.push(r),
        Err(e) => return Some(Err(e)),
    }
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
        match run(&layer, scheme.name(), false) {
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

// ---------------------------------------------------------------------------------------------
// CPU vs GPU

#[derive(Clone, Debug)]
pub enum BackendView {
    /// No GPU backend could be opened: the reason, shown as SKIPPED.
    Skipped(String),
    /// The GPU ran but failed (or does not support this layer).
    Failed {
        adapter: String,
        error: String,
    },
    Diff(BackendDiff),
}

#[derive(Clone, Debug)]
pub struct BackendDiff {
    pub adapter: String,
    pub m: usize,
    pub h: usize,
    /// `[M, H]` GPU - CPU (both fp32 accumulation).
    pub diff: Vec<f32>,
    pub max_abs: f64,
    pub rel_l2: f64,
    /// Elements whose bits agree exactly.
    pub n_exact: usize,
    /// Tokens whose top-k ids differ.
    pub routing_mismatch: usize,
    pub cpu_seconds: f64,
    pub gpu_seconds: f64,
}

impl BackendView {
    pub fn csv(&self) -> String {
        match self {
            BackendView::Skipped(why) => format!("# SKIPPED: {why}\n"),
            BackendView::Failed { adapter, error } => format!("# FAILED on {adapter}: {error}\n"),
            BackendView::Diff(d) => {
                let mut s = format!(
                    "# adapter: {}\n# max_abs,{:e}\n# rel_l2,{:e}\n# bit_exact,{}/{}\n# routing_mismatch_tokens,{}\n# cpu_s,{:.4}\n# gpu_s,{:.4}\ntoken,h,gpu_minus_cpu\n",
                    d.adapter, d.max_abs, d.rel_l2, d.n_exact, d.diff.len(), d.routing_mismatch, d.cpu_seconds, d.gpu_seconds
                );
                for (x, v) in d.diff.iter().enumerate() {
                    s += &format!("{},{},{:e}\n", x / d.h, x % d.h, v);
                }
                s
            }
        }
    }
}

/// Open the GPU backend and compare its layer output with the CPU reference (fp32 accumulation
/// on both sides, the GPU's contract).
pub fn backend_view(d: &Dataset) -> BackendView {
    let gpu = match Backend::open(BackendKind::Wgpu, None) {
        Ok(b) => b,
        Err(e) => return BackendView::Skipped(e.to_string()),
    };
    let adapter = format!("{} ({})", gpu.adapter(), gpu.name());
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        ..Default::default()
    };
    let t0 = Instant::now();
    let cpu = match forward(&d.layer, &d.hidden, &d.logits, opts) {
        Ok(y) => y,
        Err(e) => {
            return BackendView::Failed {
                adapter: "cpu".into(),
                error: e.to_string(),
            }
        }
    };
    let cpu_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let g = match gpu.moe_once(&d.layer, &d.hidden, &d.logits, opts) {
        Ok(y) => y,
        Err(e) => {
            return BackendView::Failed {
                adapter,
                error: e.to_string(),
            }
        }
    };
    let gpu_seconds = t1.elapsed().as_secs_f64();
    if g.output.len() != cpu.output.len() {
        return BackendView::Failed {
            adapter,
            error: format!(
                "the GPU returned {} values, the CPU {}",
                g.output.len(),
                cpu.output.len()
            ),
        };
    }
    let diff: Vec<f32> = g
        .output
        .iter()
        .zip(&cpu.output)
        .map(|(a, b)| a - b)
        .collect();
    let cpu64: Vec<f64> = cpu.output.iter().map(|&v| v as f64).collect();
    let (rel_l2, max_abs) = out_err(&g.output, &cpu64);
    let k = cpu.routing.top_k;
    let routing_mismatch = (0..d.m)
        .filter(|&t| {
            cpu.routing.topk_ids[t * k..(t + 1) * k] != g.routing.topk_ids[t * k..(t + 1) * k]
        })
        .count();
    BackendView::Diff(BackendDiff {
        adapter,
        m: d.m,
        h: d.layer.config.hidden,
        n_exact: g
            .output
            .iter()
            .zip(&cpu.output)
            .filter(|(a, b)| a.to_bits() == b.to_bits())
            .count(),
        diff,
        max_abs,
        rel_l2,
        routing_mismatch,
        cpu_seconds,
        gpu_seconds,
    })
}
