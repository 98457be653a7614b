//! Synthetic layers and token batches: heavy-tailed weights, skewed router logits.
//!
//! Deterministic for a seed (our own SplitMix64, so results never change with a crate update).

use super::{Activation, MoeConfig, MoeError, MoeLayer, MoeWeights, RouterConfig};
use crate::format::{pack_codes, ElemKind, MxFormat, MxTensor, ScaleMode, BLOCK};
use crate::scheme::Scheme;
use rayon::prelude::*;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, good enough for test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// Heavy-tailed: a normal times a log-normal scale (kurtosis well above a Gaussian's, as in
    /// real LLM weights and activations).
    pub fn heavy(&mut self) -> f64 {
        self.normal() * (0.6 * self.normal()).exp()
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize % n.max(1)
    }
}

/// What to synthesize.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    pub scheme: Scheme,
    pub activation: Activation,
    pub n_experts: usize,
    pub hidden: usize,
    pub inter: usize,
    pub router: RouterConfig,
    pub bias: bool,
    /// Scale mode used to quantize the weights (weights are quantized offline; `even` is Quark's).
    pub weight_scale_mode: ScaleMode,
    /// The weights times 2^this before quantization (packed layers: added to the scale bytes);
    /// 0 by default. The catalog uses it for weights whose E8M0 scale bytes exceed 128.
    pub weight_log2: i32,
    pub seed: u64,
}

impl SynthSpec {
    pub fn new(
        scheme: Scheme,
        n_experts: usize,
        hidden: usize,
        inter: usize,
        top_k: usize,
    ) -> Self {
        SynthSpec {
            scheme,
            activation: Activation::Silu,
            n_experts,
            hidden,
            inter,
            router: RouterConfig {
                top_k,
                ..RouterConfig::default()
            },
            bias: false,
            weight_scale_mode: ScaleMode::Even,
            weight_log2: 0,
            seed: 1,
        }
    }
}

/// A synthetic layer together with its unquantized weights (for quantization-error views).
#[derive(Clone, Debug)]
pub struct SynthLayer {
    pub layer: MoeLayer,
    /// `[E, 2I, H]` f32, before quantization.
    pub w13_f32: Vec<f32>,
    /// `[E, H, I]` f32, before quantization.
    pub w2_f32: Vec<f32>,
}

fn heavy_matrix(seed: u64, n: usize, k: usize, std: f64) -> Vec<f32> {
    let mut out = vec![0f32; n * k];
    out.par_chunks_mut(k).enumerate().for_each(|(r, row)| {
        let mut rng = Rng::new(seed.wrapping_mul(0x1000_0000_01B3).wrapping_add(r as u64));
        // A few outlier input channels per row, as seen in real checkpoints.
        for v in row.iter_mut() {
            *v = (rng.heavy() * std) as f32;
        }
        for _ in 0..(k / 512).max(1) {
            let c = rng.below(k);
            row[c] *= 8.0;
        }
    });
    out
}

/// Build a layer by quantizing heavy-tailed f32 weights (keeps them for error views).
pub fn synth_layer(spec: &SynthSpec) -> Result<SynthLayer, MoeError> {
    let (e, h, i) = (spec.n_experts, spec.hidden, spec.inter);
    super::budget::check_synth(spec.scheme.weight, e, h, i, false, 0)?;
    let gain = 2f64.powi(spec.weight_log2);
    let w13_f32 = heavy_matrix(spec.seed, e * 2 * i, h, gain / (h as f64).sqrt());
    let w2_f32 = heavy_matrix(spec.seed ^ 0xABCD, e * h, i, gain / (i as f64).sqrt());
    let wf = spec.scheme.weight;
    let w13 = MxTensor::quantize(wf, spec.weight_scale_mode, &w13_f32, &[e, 2 * i, h])?;
    let w2 = MxTensor::quantize(wf, spec.weight_scale_mode, &w2_f32, &[e, h, i])?;
    let layer = assemble(spec, w13, w2);
    layer.validate()?;
    Ok(SynthLayer {
        layer,
        w13_f32,
        w2_f32,
    })
}

fn assemble(spec: &SynthSpec, w13: MxTensor, w2: MxTensor) -> MoeLayer {
    let (e, h, i) = (spec.n_experts, spec.hidden, spec.inter);
    let mut rng = Rng::new(spec.seed ^ 0x5151);
    let (w13_bias, w2_bias) = if spec.bias {
        (
            Some(
                (0..e * 2 * i)
                    .map(|_| (0.05 * rng.normal()) as f32)
                    .collect(),
            ),
            Some((0..e * h).map(|_| (0.05 * rng.normal()) as f32).collect()),
        )
    } else {
        (None, None)
    };
    MoeLayer {
        config: MoeConfig {
            scheme: spec.scheme,
            activation: spec.activation,
            router: spec.router.clone(),
            act_scale_mode: ScaleMode::Even,
            n_experts: e,
            hidden: h,
            inter: i,
            local_experts: w13.shape[0],
        },
        weights: MoeWeights {
            w13,
            w2,
            w13_bias,
            w2_bias,
            e_score_correction_bias: None,
            expert_map: None,
        },
    }
}

/// A random finite code of a format (no NaN/Inf codes), biased toward mid-range magnitudes.
fn random_code(fmt: MxFormat, r: u64) -> u8 {
    let spec = fmt.spec();
    let c = (r % spec.n_codes() as u64) as u32;
    let sign = c & spec.sign_bit();
    let mag = (c & (spec.sign_bit() - 1)).min(spec.max_code);
    match spec.kind {
        ElemKind::Int => c as u8 & if c == 0x80 { 0x7F } else { 0xFF },
        ElemKind::Float => (mag | sign) as u8,
    }
}

/// Build a big layer fast from random codes and plausible scales (no f32 weights kept): for
/// timing real model shapes (a DeepSeek-R1 layer is 11 G weights).
pub fn synth_layer_packed(spec: &SynthSpec) -> Result<MoeLayer, MoeError> {
    let (e, h, i) = (spec.n_experts, spec.hidden, spec.inter);
    super::budget::check_synth(spec.scheme.weight, e, h, i, true, 0)?;
    let wf = spec.scheme.weight;
    let make = |rows: usize, k: usize, seed: u64| -> Result<MxTensor, MoeError> {
        let bb = wf.spec().block_bytes();
        let blocks = rows * k / BLOCK;
        let mut data = vec![0u8; blocks * bb];
        let mut scales = vec![0u8; blocks];
        // Scale so that |w| ~ 1/sqrt(K) for a mid-range code.
        let target = -(k as f64).log2() / 2.0 - wf.spec().emax_elem as f64 + 1.0;
        let base = (127.0 + target).round() as i32 + spec.weight_log2;
        data.par_chunks_mut(bb * 64)
            .zip(scales.par_chunks_mut(64))
            .enumerate()
            .for_each(|(ci, (d, s))| {
                let mut rng = Rng::new(seed.wrapping_add(ci as u64 * 7919));
                let mut codes = [0u8; BLOCK];
                for (db, sb) in d.chunks_exact_mut(bb).zip(s.iter_mut()) {
                    for c in codes.iter_mut() {
                        *c = random_code(wf, rng.next_u64());
                    }
                    pack_codes(wf, &codes, db);
                    *sb = (base + rng.below(3) as i32 - 1).clamp(1, 254) as u8;
                }
            });
        Ok(MxTensor::new(wf, vec![e, rows / e, k], data, scales)?)
    };
    let w13 = make(e * 2 * i, h, spec.seed)?;
    let w2 = make(e * h, i, spec.seed ^ 0xABCD)?;
    let layer = assemble(spec, w13, w2);
    layer.validate()?;
    Ok(layer)
}

/// A token batch: heavy-tailed hidden states `[M, H]` and skewed router logits `[M, E]`
/// (a Zipf-like expert popularity plus per-token noise, so some experts are hot and some get
/// no tokens, as in real routers).
pub fn synth_batch(m: usize, hidden: usize, n_experts: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng::new(seed ^ 0x7777);
    let hs: Vec<f32> = (0..m * hidden).map(|_| rng.heavy() as f32).collect();
    // Popularity: a random permutation of ranks, logit bias -1.2 * ln(rank).
    let mut perm: Vec<usize> = (0..n_experts).collect();
    for j in (1..n_experts).rev() {
        perm.swap(j, rng.below(j + 1));
    }
    let pop: Vec<f64> = perm.iter().map(|&r| -1.2 * ((r + 1) as f64).ln()).collect();
    let logits: Vec<f32> = (0..m * n_experts)
        .map(|x| (pop[x % n_experts] + 1.5 * rng.normal()) as f32)
        .collect();
    (hs, logits)
}
