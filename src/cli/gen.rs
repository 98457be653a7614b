//! `mxmoe gen`: a synthetic layer bundle and token batch.

use anyhow::{bail, Result};
use clap::Args;
use mxmoe::io::{self, TokenBatch};
use mxmoe::moe::presets::Preset;
use mxmoe::moe::synth::{synth_batch, synth_layer, synth_layer_packed, SynthSpec};
use mxmoe::moe::{budget, Activation};
use mxmoe::scheme::Scheme;
use std::path::PathBuf;
use std::time::Instant;

/// Generate a synthetic layer bundle and token batch (heavy-tailed weights, skewed router).
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe gen --scheme w_mxfp4_a_mxfp4 --experts 8 --hidden 256 --inter 128 --top-k 2 --tokens 16 \\\n      --layer-out layer.safetensors --batch-out batch.safetensors\n  \
mxmoe gen --model deepseek-r1 --tokens 4 --layer-out r1.safetensors --batch-out r1-batch.safetensors"
)]
pub struct GenArgs {
    /// A real model's layer shape and routing (gpt-oss-20b, gpt-oss-120b, deepseek-r1,
    /// qwen3-30b-a3b, llama4-maverick): sets scheme, experts, sizes, top-k, activation, biases
    /// and router, and implies --packed.
    #[arg(long)]
    model: Option<Preset>,
    #[arg(long, default_value = "w_mxfp4_a_mxfp4")]
    scheme: Scheme,
    #[arg(long, default_value_t = 8)]
    experts: usize,
    #[arg(long, default_value_t = 256)]
    hidden: usize,
    #[arg(long, default_value_t = 256)]
    inter: usize,
    #[arg(long, default_value_t = 2)]
    top_k: usize,
    #[arg(long, default_value_t = 16)]
    tokens: usize,
    #[arg(long, default_value = "silu")]
    activation: Activation,
    /// Add w13/w2 biases.
    #[arg(long)]
    bias: bool,
    /// Random codes and scales instead of quantized f32 weights (fast, for big shapes; no
    /// unquantized weights are stored).
    #[arg(long)]
    packed: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    layer_out: PathBuf,
    #[arg(long)]
    batch_out: PathBuf,
}

pub fn run(a: &GenArgs) -> Result<()> {
    let mut spec = match &a.model {
        Some(p) => p.synth_spec(),
        None => {
            let mut s = SynthSpec::new(a.scheme, a.experts, a.hidden, a.inter, a.top_k);
            s.activation = a.activation;
            s.bias = a.bias;
            s
        }
    };
    spec.seed = a.seed;
    let tokens = a.tokens;
    if tokens == 0 {
        bail!("--tokens must be at least 1");
    }
    // Every size checked (overflow-safe, against the memory available) before allocating.
    budget::check_synth(
        spec.scheme.weight,
        spec.n_experts,
        spec.hidden,
        spec.inter,
        a.packed || a.model.is_some(),
        tokens,
    )?;
    io::check_outputs(&[("--layer-out", &a.layer_out), ("--batch-out", &a.batch_out)], &[])?;
    let t0 = Instant::now();
    eprintln!(
        "generating {} layer: {} experts, H {}, I {}, top-{} ...",
        spec.scheme, spec.n_experts, spec.hidden, spec.inter, spec.router.top_k
    );
    // Both files or neither: they are renamed into place only once both are written.
    io::all_or_nothing(|| -> Result<()> {
        if a.packed || a.model.is_some() {
            let l = synth_layer_packed(&spec)?;
            io::save_layer(&a.layer_out, &l, None)?;
        } else {
            let s = synth_layer(&spec)?;
            io::save_layer(&a.layer_out, &s.layer, Some((&s.w13_f32, &s.w2_f32)))?;
        }
        let (hidden, logits) = synth_batch(tokens, spec.hidden, spec.n_experts, spec.seed);
        io::save_batch(
            &a.batch_out,
            &TokenBatch {
                hidden,
                logits,
                m: tokens,
                hidden_size: spec.hidden,
                n_experts: spec.n_experts,
            },
        )?;
        Ok(())
    })?;
    eprintln!(
        "wrote {} and {} in {:.1} s",
        a.layer_out.display(),
        a.batch_out.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
