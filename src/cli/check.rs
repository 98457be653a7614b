//! `mxmoe check`: the conformance suite on a backend (or all) against the CPU reference.

use super::open_backends;
use anyhow::{bail, Result};
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
    let mut failed = 0;
    let mut all_json = Vec::new();
    for (name, b) in open_backends(&a.backend, a.adapter.as_deref())? {
        let b = match b {
            Ok(b) => b,
            Err(e) => {
                println!("{name}: SKIPPED ({e})");
                all_json
                    .push(serde_json::json!({"backend": name, "status": "SKIPPED", "reason": e}));
                continue;
            }
        };
        println!("== {} [{}]", b.name(), b.adapter());
        let t0 = Instant::now();
        let res = check::run_suite(&b, suite);
        for r in &res {
            if a.verbose || r.status == Status::Fail {
                println!(
                    "  {:<11} {:<60} {:>8.2} ms  {}",
                    r.status.to_string(),
                    r.name,
                    r.millis,
                    r.detail
                );
            }
        }
        let (ok, fail, uns, skip) = check::summary(&res);
        failed += fail;
        println!(
            "{}: {ok} passed, {fail} failed, {uns} unsupported, {skip} skipped ({:.1} s)",
            b.name(),
            t0.elapsed().as_secs_f64()
        );
        all_json.push(serde_json::json!({
            "backend": b.name(), "adapter": b.adapter(),
            "cases": res.iter().map(|r| serde_json::json!({"name": r.name, "status": r.status.to_string(), "detail": r.detail, "ms": r.millis})).collect::<Vec<_>>(),
        }));
    }
    if let Some(p) = &a.json {
        io::write_atomic(p, serde_json::to_string_pretty(&all_json)?.as_bytes())?;
    }
    if failed > 0 {
        bail!("{failed} case(s) failed");
    }
    Ok(())
}
