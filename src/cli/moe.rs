//! `mxmoe moe`: run a MoE layer on a token batch and write the result.

use super::{meta, BackendArgs, LayerSel};
use anyhow::{bail, Context, Result};
use clap::Args;
use mxmoe::format::ScaleMode;
use mxmoe::io;
use mxmoe::moe::{Accumulate, Activation, Intermediate, MoeConfig, MoeOptions, Scoring};
use std::path::PathBuf;
use std::time::Instant;

/// Run a MoE layer on a token batch.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe moe --layer layer.safetensors --input batch.safetensors --output result.safetensors\n\n\
Layer bundle: w13_weight u8 [E, 2I, packed(H)] + w13_weight_scale, w2_weight u8 [E, H, packed(I)] +\n\
w2_weight_scale, optional w13_bias, w2_bias, e_score_correction_bias, expert_map; metadata scheme,\n\
activation, top_k, renormalize, scale_mode, scoring, n_group, topk_group, routed_scaling_factor,\n\
apply_router_weight_on_input. Checkpoints load too (`mxmoe layers PATH` lists their MoE layers; pick one\n\
with --layer-index N or --layer-name PREFIX): model directories, gpt-oss, vLLM, Quark, DeepSeek, GGUF.\n\
Batch: hidden_states [M, H] (f32/bf16/f16), router_logits [M, E] (optional when the layer has its\n\
router weights: the logits are then computed from hidden_states in f32).\n\
Result: output f32 [M, H], topk_ids i32 [M, k], topk_weights f32 [M, k]."
)]
pub struct MoeArgs {
    #[command(flatten)]
    sel: LayerSel,
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
    #[command(flatten)]
    backend: BackendArgs,
    /// Activation QDQ scale mode (overrides the layer's `scale_mode`).
    #[arg(long)]
    scale_mode: Option<ScaleMode>,
    /// GEMM accumulation: f64 (the oracle, CPU only) or f32.
    #[arg(long, default_value = "f64")]
    accumulate: Accumulate,
    /// Intermediates: f32 (contract) or bf16 (vLLM parity).
    #[arg(long, default_value = "f32")]
    intermediate: Intermediate,
    #[command(flatten)]
    over: LayerOverrides,
}

/// Flags that override a layer's metadata.
#[derive(Args, Clone, Default)]
struct LayerOverrides {
    #[arg(long)]
    top_k: Option<usize>,
    #[arg(long)]
    renormalize: Option<bool>,
    /// softmax, topk_softmax (gpt-oss) or sigmoid.
    #[arg(long)]
    scoring: Option<Scoring>,
    /// silu or swigluoai.
    #[arg(long)]
    activation: Option<Activation>,
}

impl LayerOverrides {
    fn apply(&self, c: &mut MoeConfig) {
        if let Some(k) = self.top_k {
            c.router.top_k = k;
        }
        if let Some(r) = self.renormalize {
            c.router.renormalize = r;
        }
        if let Some(s) = self.scoring {
            c.router.scoring = s;
        }
        if let Some(a) = self.activation {
            c.activation = a;
        }
    }
}

pub fn run(a: &MoeArgs) -> Result<()> {
    let (layer, input, output) = (&a.sel.layer, &a.input, &a.output);
    let opts = MoeOptions {
        accumulate: a.accumulate,
        intermediate: a.intermediate,
        ..MoeOptions::default()
    };
    let t0 = Instant::now();
    let loaded = a.sel.load()?;
    let batch = io::load_batch_for(input, loaded.router.as_ref())?;
    let mut l = loaded.layer;
    if let Some(m) = a.scale_mode {
        l.config.act_scale_mode = m;
    }
    a.over.apply(&mut l.config);
    l.validate()
        .with_context(|| format!("layer {}", layer.display()))?;
    if batch.hidden_size != l.config.hidden {
        bail!(
            "{}: hidden_states has H = {} but the layer {} has H = {}",
            input.display(),
            batch.hidden_size,
            layer.display(),
            l.config.hidden
        );
    }
    if batch.n_experts != l.config.n_experts {
        bail!(
            "{}: router_logits has {} experts but the layer {} routes over {}",
            input.display(),
            batch.n_experts,
            layer.display(),
            l.config.n_experts
        );
    }
    let t_load = t0.elapsed();
    let b = a.backend.open()?;
    let t1 = Instant::now();
    let res = b.moe_once(&l, &batch.hidden, &batch.logits, opts)?;
    let t_run = t1.elapsed();
    let c = &l.config;
    let m = meta([
        ("scheme", c.scheme.name()),
        ("backend", b.name().to_string()),
        ("scale_mode", c.act_scale_mode.name().to_string()),
        ("accumulate", opts.accumulate.name().to_string()),
        ("intermediate", opts.intermediate.name().to_string()),
    ]);
    io::save_result(output, &res.output, c.hidden, &res.routing, m)?;
    eprintln!(
        "moe {} ({} experts, H {}, I {}, top-{}) on {} tokens, backend {} [{}], {:?} accumulation, {} scales: load {:.2} s, run {:.3} s -> {}",
        c.scheme, c.n_experts, c.hidden, c.inter, c.router.top_k, batch.m, b.name(), b.adapter(), opts.accumulate, c.act_scale_mode,
        t_load.as_secs_f64(), t_run.as_secs_f64(), output.display()
    );
    Ok(())
}
