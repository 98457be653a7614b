//! `mxmoe check`: the conformance suite on a backend (or all) against the CPU reference.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use mxmoe::check::{self, Status, Suite};
use mxmoe::io;
use std::path::PathBuf;
use std::time::Instant;

/// Run the conformance suite on a backend (or all) against the CPU reference.
#[derive(Args)]
#[command(
    after_help = "Example:\n  mxmoe check --backend all\n  mxmoe check --backend wgpu --suite full --json report.json"
)]
pub struct CheckArgs {
    /// cpu, wgpu, hip, auto or all.
    #[arg(long, default_value = "all")]
    backend: String,
    #[arg(long)]
    adapter: Option<String>,
    /// quick (small shapes, CI) or full (larger shapes).
    #[arg(long, default_value = "quick")]
    suite: String,
    /// Print every case, not only failures and a summary.
    #[arg(long, short)]
    verbose: bool,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(a: &CheckArgs) -> Result<()> {
    let suite = match a.suite.as_str() {
        "quick" => Suite::Quick,
        "full" => Suite::Full,
        s => bail!("unknown suite '{s}' (expected quick or full)"),
    };
    // The case catalog on every backend that opens (outputs poisoned), each case's reference
    // computed once; with MXMOE_REQUIRE_GPU=1 a backend compiled in without a device FAILS.
    let opened = check::open_backends(&a.backend, a.adapter.as_deref(), check::require_gpu())
        .map_err(|e| anyhow!(e))?;
    for o in &opened {
        if let Ok(b) = &o.backend {
            println!("== {} [{}]", b.name(), b.adapter());
        }
    }
    let cases = check::cases(suite);
    let t0 = Instant::now();
    let reports = check::conformance(&opened, &cases, |name, r| {
        if a.verbose || r.status != Status::Ok {
            println!("{}", check::report::case_line(name, r));
        }
    });
    for r in &reports {
        println!("{}", r.summary_line());
    }
    println!(
        "{} cases of the {} suite in {:.1} s (references included)",
        cases.len(),
        a.suite,
        t0.elapsed().as_secs_f64()
    );
    if let Some(p) = &a.json {
        let all: Vec<_> = reports.iter().map(|r| r.json()).collect();
        io::write_atomic(p, serde_json::to_string_pretty(&all)?.as_bytes())?;
    }
    let failed = check::failures(&reports);
    if !failed.is_empty() {
        bail!("{} failure(s): {}", failed.len(), failed.join("; "));
    }
    Ok(())
}
