//! The SASS that ptxas makes of the sm_90a PTX (no GPU needed; scripts/test.sh fetches ptxas
//! 12.9 and nvdisasm from NVIDIA's PyPI wheels): registers and spills of the matrix-core GEMMs,
//! and the shapes and instruction budgets of the GEMM and GEMV hot loops
//! (scripts/sass_census.py). Without the tools these report SKIPPED, and fail instead with
//! `MXMOE_REQUIRE_PTXAS=1`.
use super::tests::gemm_count;
use super::*;
use std::process::Command;

/// Where a tool the SASS tests need is missing: SKIPPED, or a failure with
/// `MXMOE_REQUIRE_PTXAS=1` (scripts/test.sh sets it once it has fetched ptxas and nvdisasm).
fn sass_tool_missing(why: &str) {
    assert!(
        std::env::var("MXMOE_REQUIRE_PTXAS").map_or(true, |v| v != "1"),
        "MXMOE_REQUIRE_PTXAS=1 but {why}"
    );
    eprintln!("SKIPPED: {why}");
}

/// ptxas (`MXMOE_PTXAS`, else `ptxas` on PATH) on the sm_90a PTX, once per test process:
/// its `-v` log and the cubin's path (under the build's OUT_DIR), or why not.
fn sm90_cubin() -> &'static Result<(String, std::path::PathBuf), String> {
    static CUBIN: std::sync::OnceLock<Result<(String, std::path::PathBuf), String>> =
        std::sync::OnceLock::new();
    CUBIN.get_or_init(|| {
        let ptxas = std::env::var("MXMOE_PTXAS").unwrap_or_else(|_| "ptxas".into());
        // One folder, overwritten by each run (not one per process: they would pile up).
        let dir = std::path::Path::new(env!("OUT_DIR")).join("ptxas-test");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let src = dir.join("sm90.ptx");
        std::fs::write(&src, &PTX_SM90[..PTX_SM90.len() - 1]).map_err(|e| e.to_string())?;
        let cubin = dir.join("sm90.cubin");
        let out = Command::new(&ptxas)
            .args(["-arch=sm_90a", "-O3", "-v", "-o"])
            .arg(&cubin)
            .arg(&src)
            .output()
            .map_err(|e| format!("{ptxas}: {e}"))?;
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "ptxas failed:\n{log}");
        Ok((log, cubin))
    })
}

/// ptxas (CUDA toolkit; `MXMOE_PTXAS` names one) on the sm_90a PTX: the mma GEMMs fit in 128
/// registers (their launch bounds ask for 2 blocks of 256 threads per multiprocessor, the
/// wgmma ones 1 of 512) with no spills (the default split kernels: at most 8 bytes, outside the
/// K loop; the wgmma split 64-pair ones 48). scripts/test.sh fetches ptxas 12.9 from PyPI;
/// without one it reports SKIPPED, and fails instead with `MXMOE_REQUIRE_PTXAS=1`.
#[test]
fn ptxas_mma_gemms_fit_without_spills() {
    let log = match sm90_cubin() {
        Ok((log, _)) => log,
        Err(e) => return sass_tool_missing(e),
    };
    // "Compiling entry function 'NAME'", then its "N bytes spill stores" and "Used N registers".
    let mut seen = 0;
    for part in log.split("Compiling entry function '").skip(1) {
        let name = part.split('\'').next().unwrap();
        if !(NAMES_MMA.contains(&name) || NAMES_WGMMA.contains(&name))
            || !name.starts_with("moe_gemm")
        {
            continue;
        }
        seen += 1;
        let num_before = |tag: &str| -> u32 {
            let at = part
                .find(tag)
                .unwrap_or_else(|| panic!("{name}: no '{tag}' in\n{part}"));
            part[..at]
                .split_whitespace()
                .last()
                .unwrap()
                .parse()
                .unwrap()
        };
        let spills = num_before(" bytes spill stores");
        let regs: u32 = part
            .split("Used ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // The split kernels hold two bodies (hi + lo, and the hi-only one of the lo skip,
        // hip/gemm_mma.h gemm_mma_split): ptxas 12.9 spills 8 bytes in gemm1's 64-pair one,
        // outside the K loop (its prologue and epilogue, seen in the SASS); no more.
        // With the nv4 decode (hip/nv4.h: fewer instructions, so ptxas keeps more decoded
        // pairs in flight) ptxas 12.9 also spills 4-8 bytes in the 64-pair hi-only ones.
        // The wgmma GEMM's split 64-pair kernels (hip/gemm_wgmma.h, two staging items a thread:
        // 32 registers) spill 20-44 bytes with ptxas 12.9; the others none.
        let allowed = if name.contains("_t64_split_wg256") {
            48
        } else if (name.contains("_split") && !name.contains("_v0")) || name.contains("_t64_cb4") {
            8
        } else {
            0
        };
        assert!(spills <= allowed, "{name}: {spills} bytes of spill stores");
        assert!(regs <= 128, "{name}: {regs} registers");
        eprintln!("{name}: {regs} registers, {spills} bytes of spill stores");
    }
    assert_eq!(
        seen,
        gemm_count(&NAMES_MMA) + gemm_count(&NAMES_WGMMA),
        "ptxas reported {seen} mma GEMMs:\n{log}"
    );
}

/// The hot loops of the SASS that ptxas makes of the sm_90a PTX (nvdisasm, `MXMOE_NVDISASM`;
/// counted by scripts/sass_census.py, which names the instruction classes), against what the
/// kernels' designs say of them:
/// - the wgmma GEMM on activations in core-matrix order (`wg256c`) copies them with cp.async
///   and never stages them through registers (no shared stores in its K loop); `wg256` does;
/// - the decode GEMV (`mmab`, the default at 1-16 tokens; bound by instruction issue,
///   docs/MEASURED.md) and the default prefill GEMMs (mma, 64 pairs) stay within their
///   instruction budgets per matrix instruction, set 10 % above what ptxas 12.9 makes of them
///   today (docs/hip-gemm-mma.md, "Static census"): a change that makes them issue more fails
///   here before a GPU sees it.
#[test]
fn sass_hot_loops_keep_their_shape() {
    let cubin = match sm90_cubin() {
        Ok((_, c)) => c,
        Err(e) => return sass_tool_missing(e),
    };
    let nvdisasm = std::env::var("MXMOE_NVDISASM").unwrap_or_else(|_| "nvdisasm".into());
    let sass = cubin.with_extension("sass");
    let out = match Command::new(&nvdisasm).arg("-c").arg(cubin).output() {
        Ok(o) => o,
        Err(e) => return sass_tool_missing(&format!("{nvdisasm}: {e}")),
    };
    assert!(
        out.status.success(),
        "nvdisasm failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&sass, &out.stdout).unwrap();
    let json = cubin.with_extension("json");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/sass_census.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg("--sass")
        .arg(&sass)
        .arg("--json")
        .arg(&json)
        .args(["^moe_gemm[12]_mma_", "^moe_gemv[12]_mma"])
        .output()
        .expect("python3 (scripts/sass_census.py)");
    let _ = std::fs::remove_file(&sass); // ~50 MB of text
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sass_census.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{table}");
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = |name: &str| -> &serde_json::Value {
        rows.iter()
            .find(|r| r["kernel"] == name)
            .unwrap_or_else(|| panic!("{name}: not in the census"))
    };
    let count = |name: &str, path: &str, class: &str| -> f64 {
        row(name)[path][class]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: no hot loop with matrix instructions"))
    };
    let per_unit = |name: &str| -> f64 {
        let c = &row(name)["short"];
        let total: f64 = ["mma", "ldg", "cpa", "lds", "sts", "bar", "alu"]
            .iter()
            .map(|k| c[*k].as_f64().unwrap())
            .sum();
        total / c["units"].as_f64().unwrap()
    };
    // Every GEMM and GEMV kernel on the matrix cores has a K loop the census finds.
    let mut n = 0;
    for name in NAMES_MMA.iter().chain(&NAMES_WGMMA).chain(&NAMES_GEMV_MMA) {
        if name.starts_with("moe_gemm") || name.starts_with("moe_gemv") {
            assert!(count(name, "long", "mma") > 0.0, "{name}");
            n += 1;
        }
    }
    assert!(n >= 60, "{n} kernels");
    // wg256c: cp.async, no register staging; wg256: staged through registers.
    let mut wg = 0;
    for name in NAMES_WGMMA.iter().filter(|n| n.contains("_wg256c_")) {
        let plain = name.replace("_wg256c_", "_wg256_");
        assert_eq!(
            count(name, "long", "sts"),
            0.0,
            "{name}: shared stores in its K loop"
        );
        assert!(
            count(name, "long", "cpa") > 0.0,
            "{name}: no cp.async in its K loop"
        );
        assert!(
            count(&plain, "long", "sts") > 0.0,
            "{plain}: no shared stores in its K loop"
        );
        assert_eq!(count(&plain, "long", "cpa"), 0.0, "{plain}");
        wg += 1;
    }
    assert_eq!(wg, 12);
    // Instruction budgets (shortest path with all the loop's matrix work: the fast decode),
    // instructions per mma.sync m16n8k16; ptxas 12.9 today in brackets.
    for (name, budget) in [
        ("moe_gemv1_mmab_cb4", 22.3),         // (20.25)
        ("moe_gemv2_mmab_cb4", 22.3),         // (20.06)
        ("moe_gemv1_mmab_split_cb4", 12.2),   // (10.94)
        ("moe_gemv2_mmab_split_cb4", 12.2),   // (11.09)
        ("moe_gemm1_mma_t64_cb4", 4.45),      // (4.03)
        ("moe_gemm2_mma_t64_cb4", 4.45),      // (4.05)
        ("moe_gemm1_mma_t64_split_cb4", 4.1), // (3.67)
        ("moe_gemm2_mma_t64_split_cb4", 4.1), // (3.69)
    ] {
        let got = per_unit(name);
        assert!(
            got <= budget,
            "{name}: {got:.2} instructions per mma, budget {budget}"
        );
    }
}
