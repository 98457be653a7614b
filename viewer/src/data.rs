//! Where a [`Dataset`] comes from: a synthetic layer built from a few parameters, or a layer
//! bundle / gpt-oss checkpoint plus a token batch on disk.

use crate::analysis::{BatchInfo, Dataset, LayerEntry, ModelInfo, Origin};
use mxmoe::format::{MxTensor, ScaleMode};
use mxmoe::moe::synth::{synth_batch, synth_layer, SynthLayer, SynthSpec};
use mxmoe::moe::Scoring;
use mxmoe::scheme::Scheme;
use std::path::{Path, PathBuf};

/// The synthetic-layer panel's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthParams {
    pub scheme: Scheme,
    pub n_experts: usize,
    pub hidden: usize,
    pub inter: usize,
    pub top_k: usize,
    pub tokens: usize,
    pub scoring: Scoring,
    pub seed: u64,
}

impl Default for SynthParams {
    fn default() -> Self {
        SynthParams {
            scheme: Scheme::OCP_MX[0],
            n_experts: 64,
            hidden: 512,
            inter: 512,
            top_k: 4,
            tokens: 64,
            scoring: Scoring::Softmax,
            seed: 1,
        }
    }
}

impl SynthParams {
    /// A small fixed layer: the snapshot tests and the smoke test use it.
    pub fn small() -> Self {
        SynthParams {
            n_experts: 8,
            hidden: 64,
            inter: 64,
            top_k: 2,
            tokens: 24,
            ..Default::default()
        }
    }

    /// Reject sizes the library would reject, with a message for the panel.
    pub fn check(&self) -> Result<(), String> {
        if self.hidden == 0
            || !self.hidden.is_multiple_of(32)
            || self.inter == 0
            || !self.inter.is_multiple_of(32)
        {
            return Err("H and I must be positive multiples of 32 (the MX block size)".into());
        }
        if self.n_experts == 0 || self.top_k == 0 || self.top_k > self.n_experts {
            return Err(format!(
                "top-k = {} must be in [1, experts = {}]",
                self.top_k, self.n_experts
            ));
        }
        if self.tokens == 0 {
            return Err("the batch needs at least one token".into());
        }
        Ok(())
    }
}

/// What to load.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    Synthetic(SynthParams),
    /// A layer bundle (or gpt-oss checkpoint) and a token batch. Without a batch, a synthetic
    /// batch of `tokens` tokens is generated to fit the layer. `requant`: re-quantize the
    /// file's unquantized weights (`*_orig`) with this scheme instead of using the stored ones
    /// (an error when the file has none). `pick`: the layer index in a checkpoint with several
    /// MoE layers (a model directory); `None` = the first.
    Files {
        layer: PathBuf,
        batch: Option<PathBuf>,
        tokens: usize,
        requant: Option<Scheme>,
        pick: Option<usize>,
    },
}

impl Source {
    /// A layer file with an optional token batch, as stored.
    pub fn files(layer: impl Into<PathBuf>, batch: Option<PathBuf>, tokens: usize) -> Source {
        Source::Files {
            layer: layer.into(),
            batch,
            tokens,
            requant: None,
            pick: None,
        }
    }
}

/// What identifies a synthetic layer's weights: the router settings, the tokens and their
/// count do not change them, so changing only those reuses the layer (and its weight view).
pub type SynthKey = (Scheme, usize, usize, usize, u64);

pub fn synth_key(p: &SynthParams) -> SynthKey {
    (p.scheme, p.n_experts, p.hidden, p.inter, p.seed)
}

/// Generate the synthetic layer's weights (the expensive part: quantizing E x 3 x H x I values).
pub fn synth_base(p: &SynthParams) -> Result<SynthLayer, String> {
    p.check()?;
    let mut spec = SynthSpec::new(p.scheme, p.n_experts, p.hidden, p.inter, p.top_k);
    spec.seed = p.seed;
    synth_layer(&spec).map_err(|e| e.to_string())
}

/// A dataset from a generated layer: `p`'s router settings and a fresh token batch.
pub fn synth_dataset(p: &SynthParams, base: &SynthLayer) -> Result<Dataset, String> {
    p.check()?;
    let mut layer = base.layer.clone();
    layer.config.router.top_k = p.top_k;
    layer.config.router.scoring = p.scoring;
    // gpt-oss routing: the softmax over the selected logits already sums to 1.
    layer.config.router.renormalize = p.scoring != Scoring::TopkSoftmax;
    let (hidden, logits) = synth_batch(p.tokens, p.hidden, p.n_experts, p.seed);
    let d = Dataset {
        source: format!("synthetic (seed {})", p.seed),
        layer,
        w13_orig: Some(base.w13_f32.clone()),
        w2_orig: Some(base.w2_f32.clone()),
        hidden,
        logits,
        m: p.tokens,
        batch: BatchInfo::SYNTHETIC,
        model: None,
        router: None,
    };
    d.validate()?;
    Ok(d)
}

/// Re-quantize the unquantized weights with `scheme` (weights with scale mode `even`, the
/// library's default) in place of the stored ones.
pub fn requantize(d: &mut Dataset, scheme: Scheme) -> Result<(), String> {
    let (Some(w13), Some(w2)) = (&d.w13_orig, &d.w2_orig) else {
        return Err(format!(
            "cannot apply scheme {scheme}: the file has no unquantized weights \
             (w13_weight_orig, w2_weight_orig); re-quantizing the stored {} values would add \
             their error to the new one (see Weights > Re-quantization for that error)",
            d.layer.config.scheme.weight
        ));
    };
    let c = &d.layer.config;
    let (el, h, i) = (d.layer.local_experts(), c.hidden, c.inter);
    let f = scheme.weight;
    let q13 =
        MxTensor::quantize(f, ScaleMode::Even, w13, &[el, 2 * i, h]).map_err(|e| e.to_string())?;
    let q2 = MxTensor::quantize(f, ScaleMode::Even, w2, &[el, h, i]).map_err(|e| e.to_string())?;
    d.layer.weights.w13 = q13;
    d.layer.weights.w2 = q2;
    d.layer.config.scheme = scheme;
    d.source = format!("{} re-quantized as {scheme}", d.source);
    Ok(())
}

/// The MoE layers of a checkpoint (file, model directory or GGUF), from headers only.
pub fn list_layers(path: &Path) -> Result<Vec<LayerEntry>, String> {
    let l = mxmoe::io::list_layers(path, None).map_err(|e| e.to_string())?;
    Ok(l.iter().map(LayerEntry::of).collect())
}

pub fn load(src: &Source) -> Result<Dataset, String> {
    let d = match src {
        Source::Synthetic(p) => return synth_dataset(p, &synth_base(p)?),
        Source::Files {
            layer,
            batch,
            tokens,
            requant,
            pick,
        } => {
            // A checkpoint with several MoE layers (a model directory): list them, load the
            // picked one (the first without a pick).
            let layers = list_layers(layer)?;
            let index = match pick {
                Some(i) => Some(*i),
                None if layers.len() > 1 => Some(layers[0].index),
                None => None,
            };
            let q = mxmoe::io::LayerQuery {
                index,
                ..Default::default()
            };
            let l = mxmoe::io::load_layer_with(layer, &q).map_err(|e| e.to_string())?;
            let c = &l.layer.config;
            let (hidden, logits, m, bname, info) = match batch {
                Some(b) => {
                    let own_logits = crate::settings::safetensors_names(b)
                        .is_some_and(|n| n.iter().any(|x| x == "router_logits"));
                    let tb = mxmoe::io::load_batch_for(b, l.router.as_ref())
                        .map_err(|e| e.to_string())?;
                    let name = b.file_name().map(|n| n.to_string_lossy().to_string());
                    let info = BatchInfo {
                        hidden: Origin::File,
                        logits: if own_logits {
                            Origin::File
                        } else {
                            Origin::Router
                        },
                    };
                    (tb.hidden, tb.logits, tb.m, name.unwrap_or_default(), info)
                }
                None => {
                    let (h, lg) = synth_batch(*tokens, c.hidden, c.n_experts, 1);
                    // With the layer's router, the logits come from it (of synthetic hidden
                    // states); without, they are generated too.
                    match &l.router {
                        Some(r) => {
                            let lg = r.logits(&h).map_err(|e| e.to_string())?;
                            (
                                h,
                                lg,
                                *tokens,
                                format!("SYNTHETIC hidden states ({tokens} tokens) + router"),
                                BatchInfo {
                                    hidden: Origin::Synthetic,
                                    logits: Origin::Router,
                                },
                            )
                        }
                        None => (
                            h,
                            lg,
                            *tokens,
                            format!("SYNTHETIC batch ({tokens} tokens)"),
                            BatchInfo::SYNTHETIC,
                        ),
                    }
                }
            };
            let mut lname = layer
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let model = (layers.len() > 1).then(|| {
                let picked = layers
                    .iter()
                    .position(|x| Some(x.index) == index)
                    .unwrap_or(0);
                lname = format!("{lname} [{}]", layers[picked].name);
                ModelInfo {
                    path: layer.clone(),
                    layers: layers.clone(),
                    picked,
                }
            });
            let mut d = Dataset {
                source: format!("{lname} + {bname}"),
                layer: l.layer,
                w13_orig: l.w13_orig,
                w2_orig: l.w2_orig,
                hidden,
                logits,
                m,
                batch: info,
                model,
                router: l.router,
            };
            if let Some(s) = requant {
                d.validate()?;
                requantize(&mut d, *s)?;
            }
            d
        }
    };
    d.validate()?;
    Ok(d)
}
