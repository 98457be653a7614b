//! `mxmoe dequantize`: an MX file back to f32.

use super::{profile_backend, BackendArgs};
use anyhow::{Context, Result};
use clap::Args;
use mxmoe::format::ProfileId;
use mxmoe::io::{self, OutTensor, StFile};
use std::collections::HashMap;
use std::path::PathBuf;

/// Dequantize an MX file (written by `quantize`) back to f32.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe dequantize --input w.mxfp4.safetensors --output w.f32.safetensors\n\n\
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
}

pub fn run(a: &DequantizeArgs) -> Result<()> {
    let profile = match a.profile {
        Some(p) => p,
        None => StFile::open(&a.input)?
            .meta_parse::<ProfileId>("profile")?
            .unwrap_or_default(),
    };
    profile_backend(profile, &a.backend)?;
    let b = a.backend.open()?;
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
