//! What the views show, computed off the UI thread: one module per view, mirroring
//! [`crate::panels`] (routing, weights, activations, schemes, backends), and here what they
//! share: the [`Dataset`], the one library forward with stage taps the routing, activation and
//! scheme views are computed from ([`LayerRun`]), and the quantization statistics of a tensor
//! under one scale rule ([`QuantStats`], used by the weight and activation views).
//!
//! Everything here is plain data plus pure functions over a [`Dataset`], so the worker thread,
//! the snapshot tests and the CSV export share one definition. Error metrics:
//! * relative error of a set of values = `||q - x||_2 / ||x||_2` (0 when `x` is all zero);
//! * an element is *saturated* when `|x| / 2^scale > max_normal` of the format: the scale rule
//!   left it outside the element range, so it was clipped to `±max_normal`.

pub mod activations;
pub mod backends;
pub mod model;
pub mod packed;
pub mod routing;
pub mod schemes;
pub mod weights;

pub use activations::{act_view, ActView};
pub use backends::{backend_view, cpu, gpu, prepare_gpu, BackendDiff, BackendView, ResidentLayer};
pub use model::{model_routing, LayerRouting, LoadStats, ModelRouting};
pub use packed::{packed_view, CodeClass, PackedTensor, PackedView, Requant};
pub use routing::{routing_view, RoutingView};
pub use schemes::{reference_forward, scheme_view, SchemeCache, SchemeRow, SchemeView};
pub use weights::{weight_view, WeightView};

use mxmoe::format::{
    decode_elem_f64, e8m0_to_f32, quantize_block, MxFormat, MxTensor, ScaleMode, BLOCK, SCALE_NAN,
};
use mxmoe::moe::{Accumulate, Intermediate, MoeLayer, MoeOptions, Routing, StageTaps};
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
    /// Where the token batch came from (a synthetic batch is labelled as such in the UI).
    pub batch: BatchInfo,
    /// The checkpoint's MoE layers when it holds several (a model directory), and which one
    /// this is.
    pub model: Option<ModelInfo>,
    /// The layer's router weights, when the checkpoint has them.
    pub router: Option<mxmoe::moe::gate::RouterWeights>,
}

/// One MoE layer of a checkpoint, as listed from its headers.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerEntry {
    /// The model's layer number.
    pub index: usize,
    /// Its name prefix (e.g. `model.layers.3.mlp`).
    pub name: String,
    /// Naming convention (vllm, hf-gpt-oss, deepseek, ...), for the picker.
    pub convention: String,
    /// Packed weight + scale bytes.
    pub bytes: usize,
    /// Whether the layer has the router's weights.
    pub router: bool,
}

impl LayerEntry {
    pub fn of(l: &mxmoe::io::LayerInfo) -> LayerEntry {
        LayerEntry {
            index: l.index,
            name: l.name.clone(),
            convention: format!("{:?}", l.convention),
            bytes: l.bytes,
            router: l.router,
        }
    }
}

/// A checkpoint with several MoE layers: its path, its layers, the one loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    pub path: std::path::PathBuf,
    pub layers: Vec<LayerEntry>,
    /// Position of the loaded layer in `layers`.
    pub picked: usize,
}

/// Where one part of the token batch came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Read from the token batch file.
    File,
    /// Generated (seeded, heavy-tailed hidden states; Zipf-skewed router logits): not a real
    /// model's data.
    Synthetic,
    /// Router logits computed from the hidden states with the checkpoint's router weights.
    Router,
}

/// Where the hidden states and the router logits came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchInfo {
    pub hidden: Origin,
    pub logits: Origin,
}

impl BatchInfo {
    pub const FILE: BatchInfo = BatchInfo {
        hidden: Origin::File,
        logits: Origin::File,
    };
    pub const SYNTHETIC: BatchInfo = BatchInfo {
        hidden: Origin::Synthetic,
        logits: Origin::Synthetic,
    };
    /// Any part generated rather than read or computed from the file.
    pub fn is_synthetic(&self) -> bool {
        self.hidden == Origin::Synthetic || self.logits == Origin::Synthetic
    }
    /// A short label for the UI, e.g. "SYNTHETIC batch: hidden states and router logits generated".
    pub fn label(&self) -> String {
        let part = |o: Origin| match o {
            Origin::File => "from the file",
            Origin::Synthetic => "SYNTHETIC",
            Origin::Router => "from the layer's router",
        };
        match (self.hidden, self.logits) {
            (Origin::Synthetic, Origin::Synthetic) => {
                "SYNTHETIC batch: hidden states and router logits are generated, not a model's"
                    .into()
            }
            (h, l) => format!("hidden states {}, router logits {}", part(h), part(l)),
        }
    }
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
// The one forward the views share

/// The dataset's layer run once by the library (the CPU reference, f64 accumulation: the
/// oracle) with stage taps. The routing view takes its routing, the activation view the
/// activation tap (what the intermediate QDQ reads), the scheme view its output as the "as
/// stored" row: no view runs a forward of this layer of its own.
#[derive(Clone, Debug)]
pub struct LayerRun {
    /// `[M, H]`.
    pub output: Vec<f32>,
    pub routing: Routing,
    pub stages: StageTaps,
    /// Seconds the forward took (stage taps included).
    pub seconds: f64,
}

/// The options of the shared forward: f64 accumulation, fp32 intermediates, stage taps.
pub const LAYER_RUN: MoeOptions = MoeOptions {
    accumulate: Accumulate::F64,
    intermediate: Intermediate::F32,
    taps: true,
    profile: mxmoe::format::ProfileId::Contract,
};

/// Run the dataset's layer once on the CPU backend (opened once per process) with stage taps.
pub fn layer_run(d: &Dataset) -> Result<LayerRun, String> {
    let t0 = Instant::now();
    let o = cpu()
        .moe_once(&d.layer, &d.hidden, &d.logits, LAYER_RUN)
        .map_err(|e| e.to_string())?;
    let seconds = t0.elapsed().as_secs_f64();
    let stages = o
        .stages
        .ok_or("the CPU forward returned no stage taps (internal error)")?;
    Ok(LayerRun {
        output: o.output,
        routing: o.routing,
        stages,
        seconds,
    })
}

/// Relative L2 error and max |error| of `y` against an f64 reference.
pub(crate) fn out_err(y: &[f32], reference: &[f64]) -> (f64, f64) {
    let (mut e2, mut r2, mut mx) = (0f64, 0f64, 0f64);
    for (&a, &b) in y.iter().zip(reference) {
        let d = a as f64 - b;
        e2 += d * d;
        r2 += b * b;
        mx = mx.max(d.abs());
    }
    (rel(e2, r2), mx)
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
    /// 101 quantiles (0, 1, ..., 100 %) of the finite `block_rel`: the distribution the views
    /// draw instead of a raw scatter of every block.
    pub block_q: Vec<f32>,
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

pub(crate) fn rel(err2: f64, x2: f64) -> f64 {
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
        block_q: packed::quantiles(&block_rel, 101),
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

pub(crate) const SUMMARY_HEADER: &str =
    "tensor,format,rule,rel_l2,max_abs,saturated_share,elements\n";

pub(crate) fn all_rules(stored: bool) -> Vec<Rule> {
    let mut r: Vec<Rule> = ScaleMode::ALL.iter().map(|&m| Rule::Mode(m)).collect();
    if stored {
        r.push(Rule::Stored);
    }
    r
}
