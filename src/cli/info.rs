//! `mxmoe info`: the backends and adapters present, the formats, scale modes and schemes.

use super::open_backends;
use anyhow::Result;
use clap::Args;
use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::scheme::Scheme;

/// List the backends and adapters present, with features and limits.
#[derive(Args)]
pub struct InfoArgs {}

pub fn run(_: &InfoArgs) -> Result<()> {
    println!("mxmoe {}", env!("CARGO_PKG_VERSION"));
    // The knobs in effect (docs/ENVIRONMENT.md), so a report or a measurement shows them.
    let mut set: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("MXMOE_") || k == "WGPU_BACKEND")
        .collect();
    set.sort();
    if set.is_empty() {
        println!("environment: no MXMOE_* variable set (docs/ENVIRONMENT.md lists them)");
    } else {
        println!("environment (docs/ENVIRONMENT.md):");
        for (k, v) in set {
            println!("  {k}={v}");
        }
    }
    println!("backends:");
    for (name, b) in open_backends("all", None)? {
        match b {
            Ok(b) => {
                match name.as_str() {
                    "cpu" => println!(
                        "  cpu   available   {} (exact reference; f64/f32 accumulation)",
                        b.adapter()
                    ),
                    "wgpu" => println!("  wgpu  available   picks: {}", b.adapter()),
                    _ => println!("  {name:<5} available   {}", b.adapter()),
                }
                for n in b.notes() {
                    println!("        {n}");
                }
            }
            Err(e) => println!("  {name:<5} unavailable ({e})"),
        }
        if name == "hip" {
            print_hip_devices();
        }
        if name == "wgpu" {
            let adapters = mxmoe::backend::wgpu::enumerate_adapters();
            println!("wgpu adapters ({}):", adapters.len());
            for a in &adapters {
                println!("  - {a}");
            }
        }
    }
    println!("formats: {}", MxFormat::ALL.map(|f| f.name()).join(", "));
    let modes = ScaleMode::ALL.map(|m| {
        if m == ScaleMode::default() {
            format!("{m} (default)")
        } else {
            m.to_string()
        }
    });
    println!("scale modes: {}", modes.join(", "));
    println!("schemes: {}", Scheme::ALL.map(|s| s.name()).join(", "));
    Ok(())
}

/// The HIP devices (name, gfx arch or compute capability, memory, which code object serves it)
/// and the compilers that built the code objects.
fn print_hip_devices() {
    match mxmoe::backend::hip::devices() {
        Ok(ds) => {
            println!("hip devices ({}):", ds.len());
            for d in &ds {
                println!(
                    "  - {} ({}, {:.0} GiB, via {}): {}",
                    d.name,
                    d.arch,
                    d.memory_gib,
                    d.library,
                    match &d.code_object {
                        Ok(c) => format!("kernels from the embedded {c}"),
                        Err(e) => format!("NO KERNELS: {e}"),
                    }
                );
            }
        }
        Err(e) => println!("hip devices: none ({e})"),
    }
    let built = mxmoe::backend::hip::built_with();
    if !built.is_empty() {
        println!("hip code objects built with:");
        for l in built.lines() {
            println!("  - {l}");
        }
    }
}
