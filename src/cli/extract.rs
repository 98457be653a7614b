//! `mxmoe extract`: one MoE layer of a checkpoint as a layer bundle.

use super::layers::human;
use super::LayerSel;
use anyhow::{bail, Result};
use clap::Args;
use mxmoe::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Write one MoE layer of a checkpoint (any convention, GGUF too) as a layer bundle.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe layers ./DeepSeek-R1-MXFP4\n  mxmoe extract --layer ./DeepSeek-R1-MXFP4 --layer-index 3 --output layer3.safetensors\n\n\
The bundle holds the packed experts and scales (vLLM names), biases, the correction bias, the\n\
router weights (router_weight [E, H], router_bias [E]) when the checkpoint has them, and the routing\n\
keys as metadata. The output is written to a temporary file and renamed, so it is never half-written;\n\
an output that is one of the input files is refused."
)]
pub struct ExtractArgs {
    #[command(flatten)]
    sel: LayerSel,
    /// The layer bundle to write.
    #[arg(long)]
    output: PathBuf,
}

/// Whether `out` names an existing file that is `input` or one of its files (a directory's).
fn is_input(out: &Path, input: &Path) -> bool {
    let Ok(o) = out.canonicalize() else {
        return false; // does not exist yet
    };
    let Ok(i) = input.canonicalize() else {
        return false;
    };
    if o == i {
        return true;
    }
    i.is_dir() && o.parent() == Some(i.as_path()) && {
        let ext = o.extension().and_then(|x| x.to_str()).unwrap_or("");
        matches!(ext, "safetensors" | "gguf" | "json")
    }
}

pub fn run(a: &ExtractArgs) -> Result<()> {
    if is_input(&a.output, &a.sel.layer) {
        bail!(
            "--output {} is an input file of {}: refusing to overwrite it",
            a.output.display(),
            a.sel.layer.display()
        );
    }
    let t0 = Instant::now();
    let l = a.sel.load()?;
    let c = &l.layer.config;
    eprintln!(
        "loaded {} ({} experts, H {}, I {}, top-{}, {}) in {:.2} s; writing {} ...",
        c.scheme,
        c.n_experts,
        c.hidden,
        c.inter,
        c.router.top_k,
        human(l.layer.weight_bytes()),
        t0.elapsed().as_secs_f64(),
        a.output.display()
    );
    io::save_loaded(&a.output, &l)?;
    eprintln!(
        "wrote {} in {:.2} s{}",
        a.output.display(),
        t0.elapsed().as_secs_f64(),
        if l.router.is_some() {
            " (with router weights)"
        } else {
            ""
        }
    );
    Ok(())
}
