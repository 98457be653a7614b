//! `mxmoe golden`: write the published MX vector set ([`mxmoe::check::golden`]).

use anyhow::{bail, Result};
use clap::Args;
use mxmoe::check::golden;
use std::path::PathBuf;

/// Write the published MX quantization vectors (safetensors + manifest.json + README.md).
#[derive(Args)]
#[command(after_help = "Example:\n  mxmoe golden --out golden/\n\n\
Writes mx_vectors.safetensors, manifest.json (per case: format, scale mode, profile, description,\n\
source, rows, FNV-1a 64 checksum) and README.md (how to check an implementation against them).\n\
Cases: `hand` (G4-G14 of docs/NUMERICS.md 12, as in assets/golden/vectors.json), `edge` (edge-case\n\
blocks under the contract, every format and mode) and `profile` (the same blocks under each\n\
compatibility profile). The repository ships the same files under assets/golden/.")]
pub struct GoldenArgs {
    /// Output folder (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Replace files already in the folder.
    #[arg(long)]
    force: bool,
}

pub fn run(a: &GoldenArgs) -> Result<()> {
    for f in [
        golden::TENSORS_FILE,
        golden::MANIFEST_FILE,
        golden::README_FILE,
    ] {
        let p = a.out.join(f);
        if p.exists() && !a.force {
            bail!("{} exists (use --force to replace it)", p.display());
        }
    }
    let m = golden::write(&a.out).map_err(anyhow::Error::msg)?;
    let count = |k: &str| m.cases.iter().filter(|c| c.kind == k).count();
    eprintln!(
        "wrote {} cases ({} hand, {} edge, {} profile) to {}",
        m.cases.len(),
        count("hand"),
        count("edge"),
        count("profile"),
        a.out.display()
    );
    Ok(())
}
