//! `mxmoe dequantize`: an MX file back to f32.

use super::{profile_backend, BackendArgs, LayerPick};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::format::ProfileId;
use mxmoe::io::{self, OutTensor, StFile};
use std::collections::HashMap;
use std::path::PathBuf;

/// Dequantize an MX file (written by `quantize`), or a layer's experts, back to f32.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe dequantize --input w.mxfp4.safetensors --output w.f32.safetensors\n  \
mxmoe dequantize --input ./gpt-oss-20b --layer-index 0 --output experts0.f32.safetensors\n\n\
An input without `format` metadata is read as a layer file or checkpoint (bundle, model directory,\n\
GGUF): its experts become w13_weight [E, 2I, H] and w2_weight [E, H, I] (f32), metadata scheme.\n\n\
The profile is the file's `profile` metadata (written by `quantize --profile`) unless --profile\n\
overrides it: it decides the FP4 nibble order (ggml: split) and how a scale byte 255 decodes\n\
(contract: NaN; quark: +Inf as vLLM's _dequant_mxfp6; ggml: 2^128)."
)]
pub struct DequantizeArgs {
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    output: PathBuf,
    /// Compatibility profile (default: the file's, else contract).
    #[arg(long)]
    profile: Option<ProfileId>,
    #[command(flatten)]
    backend: BackendArgs,
    #[command(flatten)]
    pick: LayerPick,
}

pub fn run(a: &DequantizeArgs) -> Result<()> {
    io::check_outputs(&[("--output", &a.output)], &[("--input", &a.input)])?;
    // The file's `profile` metadata, unless --profile overrides it (a checkpoint or model
    // directory has none: contract).
    let profile = match a.profile {
        Some(p) => p,
        None => match StFile::open(&a.input) {
            Ok(f) => f.meta_parse::<ProfileId>("profile")?.unwrap_or_default(),
            Err(_) => ProfileId::default(),
        },
    };
    profile_backend(profile, &a.backend)?;
    let b = a.backend.open()?;
    let mx_file =
        !a.input.is_dir() && io::StFile::open(&a.input).is_ok_and(|f| f.meta("format").is_some());
    if !mx_file && a.pick.is_layer_input(&a.input) {
        let (ts, scheme) = a.pick.expert_floats(&b, &a.input)?;
        let out: Vec<OutTensor> = ts
            .iter()
            .map(|t| OutTensor::f32(t.name.clone(), t.shape.clone(), &t.data))
            .collect();
        let m = super::meta([("scheme", scheme.name())]);
        io::save(&a.output, &out, m)?;
        eprintln!(
            "dequantized the layer's experts on {}: {}",
            b.name(),
            a.output.display()
        );
        return Ok(());
    }
    let (ts, _) = io::load_mx(&a.input)?;
    let mut out = Vec::new();
    for (n, t) in &ts {
        let v = if profile == ProfileId::Contract {
            b.dequantize(t)
                .with_context(|| format!("dequantizing '{n}'"))?
        } else {
            profile.spec().dequantize(t)
        };
        out.push(OutTensor::f32(n.clone(), t.shape.clone(), &v));
    }
    io::save(&a.output, &out, HashMap::new())?;
    eprintln!(
        "dequantized {} tensor(s) (profile {profile}) on {}: {}",
        out.len(),
        b.name(),
        a.output.display()
    );
    Ok(())
}
