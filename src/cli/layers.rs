//! `mxmoe layers`: the MoE layers of a checkpoint (file or model directory).

use anyhow::Result;
use clap::Args;
use mxmoe::io;
use mxmoe::scheme::Scheme;
use std::path::PathBuf;

/// List the MoE layers of a checkpoint: index, name, naming convention, scheme, experts, H, I,
/// top-k and bytes (headers only: nothing is loaded).
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe layers ./gpt-oss-120b\n  mxmoe moe --layer ./gpt-oss-120b --layer-index 3 --input batch.safetensors --output out.safetensors\n\n\
PATH is a layer bundle, a safetensors file, a GGUF file, or a model directory (model.safetensors.index.json\n\
and its shards, or *.safetensors files; config.json is read for the scheme and routing). Naming\n\
conventions: layer-bundle, vllm (*.experts.w13_weight), hf-gpt-oss (*.experts.gate_up_proj_blocks),\n\
gpt-oss-original (block.N.mlp.mlp1_weight.blocks), quark-per-expert (*.experts.E.gate_proj.weight +\n\
weight_scale), deepseek (the same with mlp.gate.e_score_correction_bias), gguf (blk.N.ffn_*_exps, MXFP4)."
)]
pub struct LayersArgs {
    /// A checkpoint file or model directory.
    path: PathBuf,
    /// The scheme, when the checkpoint does not record it (overrides metadata and config.json).
    #[arg(long)]
    scheme: Option<Scheme>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Bytes in a short human form (binary units).
pub fn human(b: usize) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

pub fn run(a: &LayersArgs) -> Result<()> {
    let layers = io::list_layers(&a.path, a.scheme)?;
    if a.json {
        let v: Vec<serde_json::Value> = layers
            .iter()
            .map(|l| {
                let c = &l.config;
                serde_json::json!({
                    "index": l.index, "name": l.name, "convention": l.convention.name(),
                    "scheme": c.scheme.name(), "scheme_from": l.scheme_from,
                    "experts": c.n_experts, "local_experts": c.local_experts,
                    "hidden": c.hidden, "inter": c.inter, "top_k": c.router.top_k,
                    "scoring": c.router.scoring.name(), "activation": c.activation.name(),
                    "bytes": l.bytes, "router_weights": l.router,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:>5}  {:<28} {:<17} {:<22} {:>7} {:>6} {:>6} {:>5} {:>10}  router",
        "index", "name", "convention", "scheme", "experts", "H", "I", "top-k", "bytes"
    );
    for l in &layers {
        let c = &l.config;
        let name = if l.name.is_empty() { "-" } else { &l.name };
        println!(
            "{:>5}  {:<28} {:<17} {:<22} {:>7} {:>6} {:>6} {:>5} {:>10}  {}",
            l.index,
            name,
            l.convention.name(),
            c.scheme.name(),
            c.n_experts,
            c.hidden,
            c.inter,
            c.router.top_k,
            human(l.bytes),
            if l.router { "yes" } else { "no" }
        );
    }
    let mut froms: Vec<&str> = layers.iter().map(|l| l.scheme_from.as_str()).collect();
    froms.dedup();
    eprintln!(
        "{} MoE layer(s) in {}; scheme from: {}",
        layers.len(),
        a.path.display(),
        froms.join("; ")
    );
    Ok(())
}
