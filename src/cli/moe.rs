//! `mxmoe moe`: run a MoE layer on a token batch and write the result.

use super::{meta, profile_backend, BackendArgs, LayerSel};
use anyhow::{bail, Context, Result};
use clap::Args;
use mxmoe::format::{ProfileId, ScaleMode};
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
    /// Compatibility profile of the activation QDQs: contract (default), ocp, quark, torchao,
    /// nvidia, microxcaling or ggml (docs/NUMERICS.md 17; CPU backend only). Without
    /// --scale-mode, a layer mode the peer lacks becomes the profile's own.
    #[arg(long, default_value = "contract")]
    profile: ProfileId,
    /// GEMM accumulation: f64 (the oracle, CPU only; the CPU's default) or f32 (the GPU
    /// backends' only and default accumulation).
    #[arg(long)]
    accumulate: Option<Accumulate>,
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
    io::check_outputs(&[("--output", output)], &[("--layer", layer), ("--input", input)])?;
    profile_backend(a.profile, &a.backend)?;
    let t0 = Instant::now();
    let loaded = a.sel.load()?;
    for w in &loaded.warnings {
        eprintln!("warning: {}: {w}", layer.display());
    }
    let batch = io::load_batch_for(input, loaded.router.as_ref())?;
    let mut l = loaded.layer;
    if let Some(m) = a.scale_mode {
        l.config.act_scale_mode = m;
    }
    let p = a.profile.spec();
    if a.scale_mode.is_none() && !p.modes.contains(&l.config.act_scale_mode) {
        eprintln!(
            "profile {}: {} has no '{}' scale mode; using its '{}'",
            p.name, p.peer, l.config.act_scale_mode, p.default_mode
        );
        l.config.act_scale_mode = p.default_mode;
    }
    if let Some(f) = l.config.scheme.activation {
        p.check(f, l.config.act_scale_mode)?;
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
    // What the backend really accumulates in (the label and the metadata say that).
    let accumulate = match a.accumulate {
        Some(Accumulate::F64) if b.accumulation(Accumulate::F64) != Accumulate::F64 => bail!(
            "--accumulate f64: backend {} accumulates in f32 only (f64 is the CPU reference's)",
            b.name()
        ),
        Some(x) => x,
        None => b.accumulation(Accumulate::F64),
    };
    let opts = MoeOptions {
        accumulate,
        intermediate: a.intermediate,
        profile: a.profile,
        ..MoeOptions::default()
    };
    let t1 = Instant::now();
    let res = b.moe_once(&l, &batch.hidden, &batch.logits, opts)?;
    let t_run = t1.elapsed();
    let c = &l.config;
    let mut m = meta([
        ("scheme", c.scheme.name()),
        ("backend", b.name().to_string()),
        ("scale_mode", c.act_scale_mode.name().to_string()),
        ("profile", a.profile.name().to_string()),
        ("accumulate", opts.accumulate.name().to_string()),
        ("intermediate", opts.intermediate.name().to_string()),
    ]);
    if !loaded.warnings.is_empty() {
        // Recorded with the result: whoever reads it later sees the layer was suspect.
        let w: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
        m.insert("warnings".into(), w.join("; "));
    }
    io::save_result(output, &res.output, c.hidden, &res.routing, m)?;
    eprintln!(
        "moe {} ({} experts, H {}, I {}, top-{}) on {} tokens, backend {} [{}], {} accumulation, {} scales: load {:.2} s, run {:.3} s -> {}",
        c.scheme, c.n_experts, c.hidden, c.inter, c.router.top_k, batch.m, b.name(), b.adapter(), opts.accumulate.name(), c.act_scale_mode,
        t_load.as_secs_f64(), t_run.as_secs_f64(), output.display()
    );
    Ok(())
}
