//! `mxmoe info`: the backends and adapters present, the formats, scale modes and schemes.

use anyhow::Result;
use clap::Args;
use mxmoe::backend::{Backend, BackendKind};
use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::scheme::Scheme;

/// List the backends and adapters present, with features and limits.
#[derive(Args)]
pub struct InfoArgs {}

pub fn run(_: &InfoArgs) -> Result<()> {
    println!("mxmoe {}", env!("CARGO_PKG_VERSION"));
    println!("backends:");
    println!(
        "  cpu   available   {} (exact reference; f64/f32 accumulation)",
        Backend::open(BackendKind::Cpu, None)?.adapter()
    );
    match Backend::open(BackendKind::Wgpu, None) {
        Ok(b) => println!("  wgpu  available   picks: {}", b.adapter()),
        Err(e) => println!("  wgpu  unavailable ({e})"),
    }
    let adapters = mxmoe::backend::wgpu::enumerate_adapters();
    println!("wgpu adapters ({}):", adapters.len());
    for a in &adapters {
        println!("  - {a}");
    }
    match Backend::open(BackendKind::Hip, None) {
        Ok(b) => println!("  hip   available   {}", b.adapter()),
        Err(e) => println!("  hip   unavailable ({e})"),
    }
    println!("formats: {}", MxFormat::ALL.map(|f| f.name()).join(", "));
    let modes = ScaleMode::ALL.map(|m| match m == ScaleMode::default() {
        true => format!("{m} (default)"),
        false => m.to_string(),
    });
    println!("scale modes: {}", modes.join(", "));
    println!("schemes: {}", Scheme::ALL.map(|s| s.name()).join(", "));
    Ok(())
}
