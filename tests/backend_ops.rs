//! The case catalog (`src/check/catalog.rs`) on every backend (ARCHITECTURE.md "Testing
//! model"): the cross-backend tests, written once.
//!
//! Every kind in `BackendKind::ALL` is opened with outputs poisoned; one that cannot be opened
//! is reported SKIPPED, or FAILS when it is compiled in and `MXMOE_REQUIRE_GPU=1` (the default
//! of `scripts/test.sh`; for the HIP backend `MXMOE_REQUIRE_HIP=1`, since CI builds it but has
//! no GPU for it). Each quick-suite case runs on each open backend against the CPU
//! reference: bit-exact for quantize / dequantize / QDQ and routing ids, routing weights bit-exact
//! or within a typed tolerance (as each case says), MoE outputs within a tolerance, an error for
//! invalid inputs. An op a backend does not
//! support is UNSUPPORTED with its reason, printed, not a failure. Each test prints one line
//! per case and backend and a summary, and fails with the list of failing ids. A new backend
//! needs no new test file: its arm in the backend enum (and `BackendKind::ALL`) is enough.
//!
//! Run with `--nocapture` to see the lines of passing tests.

use mxmoe::check::catalog::{self, Kind};
use mxmoe::check::run::{judge, reference, Call, Output};
use mxmoe::check::{self, Case, Expect, Opened, Suite, Tol, Weights};
use mxmoe::format::{MxFormat, ScaleMode};
use mxmoe::moe::{MoeOutput, RouterConfig, Routing, Scoring};
use std::collections::HashSet;
use std::sync::OnceLock;

#[cfg(feature = "hip")]
mod host_cxx;

static BACKENDS: OnceLock<Vec<Opened>> = OnceLock::new();

fn backends() -> &'static [Opened] {
    BACKENDS.get_or_init(|| {
        let opened = check::open_backends("all", None, check::require_gpu())
            .expect("'all' names every backend");
        for o in &opened {
            match &o.backend {
                Ok(b) => eprintln!("{}: {}", o.name, b.adapter()),
                Err(e) if o.fails => {
                    eprintln!(
                        "{}: FAIL ({e}; {}=1)",
                        o.name,
                        check::run::require_var(&o.name)
                    )
                }
                Err(e) => eprintln!(
                    "{}: SKIPPED ({e}; set {}=1 to fail)",
                    o.name,
                    check::run::require_var(&o.name)
                ),
            }
        }
        opened
    })
}

/// Run the quick-suite cases that `pick` selects on every backend.
fn run_catalog(label: &str, pick: impl Fn(&Case) -> bool) {
    let cases: Vec<Case> = check::cases(Suite::Quick)
        .into_iter()
        .filter(|c| pick(c))
        .collect();
    assert!(!cases.is_empty(), "{label}: no cases");
    let reports = check::conformance(backends(), &cases, |name, r| {
        println!("{}", check::report::case_line(name, r));
    });
    println!("{label}: {} cases", cases.len());
    for r in &reports {
        println!("{}", r.summary_line());
    }
    let failed = check::failures(&reports);
    assert!(
        failed.is_empty(),
        "{label}: {} failure(s):\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[test]
fn quantize_dequantize_qdq() {
    run_catalog("formats", |c| {
        matches!(
            c.kind,
            Kind::Quantize { .. } | Kind::Dequantize { .. } | Kind::Qdq { .. }
        )
    });
}

#[test]
fn routing() {
    run_catalog("routing", |c| matches!(c.kind, Kind::Route(_)));
}

#[test]
fn moe_forward() {
    run_catalog("moe", Case::is_moe);
}

#[test]
fn invalid_inputs_are_errors() {
    run_catalog("invalid inputs", |c| matches!(c.kind, Kind::Invalid(_)));
}

/// The HIP backend on GPUs CI does not have: two stand-ins for the vendor driver, built here with
/// clang++, run the kernels of hip/mxmoe.cu on the CPU as the GPU would (hip/test/emu_core.h:
/// every GPU thread a fiber, barriers as scheduler rounds): hip/test/hip_emu.cpp as
/// libamdhip64.so, an MI350 (gfx950) or MI300 (gfx942) with 64-lane wavefronts and the MFMA
/// instructions emulated from AMD's documented layouts (hip/test/amd_emu.h), and
/// hip/test/cuda_emu.cpp as the CUDA driver, an H200 (sm_90) with mma.sync, ldmatrix, cp.async
/// and the other PTX the kernels use emulated from the PTX ISA (hip/test/nv_emu.h). The whole
/// quick catalog then runs through the real backend (device open, code-object choice, kernel
/// names, launch geometry, the weight layouts) with `mxmoe check --backend hip`, against the CPU
/// reference as on any GPU: every case must pass, and the kernels named must have run (the
/// scaled-MFMA GEMMs on gfx950, the bf16 MFMA GEMMs on both AMD targets, the warp routing of
/// every width (routers of up to 128, 256 and 1024 experts) on all three, the matrix-core GEMV
/// and GEMM on sm_90, the wgmma GEMM (sm_90a) with the GEMM forced, and the
/// older kernels behind the knobs). Not the hardware: that the GPUs
/// follow their vendors' documents, and the compilers' code, stay unchecked here (CI
/// disassembles the AMD objects; the NVIDIA kernels ran on an H200, docs/MEASURED.md).
#[cfg(feature = "hip")]
#[test]
fn hip_backend_on_emulated_gpus() {
    use std::process::Command;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let cxx = host_cxx::host_cxx();
    let dir = tempfile::tempdir().unwrap();
    let build = |src: &str, lib: &str| {
        let path = dir.path().join(lib);
        let out = Command::new(cxx)
            .args([
                "-std=c++20",
                "-O1",
                "-shared",
                "-fPIC",
                "-Wno-ignored-attributes",
                "-Wno-psabi",
            ])
            .arg("-I")
            .arg(root.join("hip"))
            .arg(root.join(src))
            .arg("-o")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cxx} {src}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        path
    };
    let amd = build("hip/test/hip_emu.cpp", "libamdhip64_emu.so");
    // A library name containing "cuda" is driven through the CUDA driver API (driver.rs).
    let nv = build("hip/test/cuda_emu.cpp", "libcuda_emu.so");
    // (library, arch, knobs, kernels that must have run): the defaults on each target, gfx942
    // with the first routing and GEMV kernels, sm_90 with the GEMM on every MoE case, with the
    // v2 GEMM (and the v3 GEMV: both decode the stored layout) and with the two-tile GEMV.
    type Run<'a> = (
        &'a std::path::Path,
        &'a str,
        &'a [(&'a str, &'a str)],
        &'a [&'a str],
    );
    // Both AMD targets by default: the bf16 GEMM of weight-only 8-bit codes and the warp
    // routing of the wide routers (8 and 32 keys a lane: more than 128 and 256 experts; the
    // grouped sigmoid router of 1024 experts).
    let amd_default = [
        "moe_gemm1_split_cb8",
        "moe_gemm2_split_cb8",
        "moe_route_lists_w2_8",
        "moe_route_lists_w2_32",
        "moe_route_lists_w3_8",
        "moe_route_lists_w3_32",
        "mx_route_w_8",
        "mx_route_w_32",
        "moe_route_lists_w2g_8",
        "moe_route_lists_w2g_32",
        "mx_route_wg_32",
    ];
    let gfx950: Vec<&str> = [
        "moe_gemm1_mx_fp4_fp4",
        "moe_gemm2_mx_fp6e2m3_fp6e2m3",
        "moe_gemm1_split_cb4",
    ]
    .into_iter()
    .chain(amd_default)
    .collect();
    let gfx942: Vec<&str> = ["moe_gemm1_cb4", "moe_gemm2_split_cb6", "moe_gemm1_cb8"]
        .into_iter()
        .chain(amd_default)
        .collect();
    let runs: [Run; 11] = [
        (&amd, "gfx950", &[], &gfx950),
        (&amd, "gfx942", &[], &gfx942),
        (
            &amd,
            "gfx942",
            &[("MXMOE_HIP_ROUTE", "v1"), ("MXMOE_HIP_GEMV", "v1")],
            &["moe_lists", "moe_route_lists", "moe_gemv1_cb4"],
        ),
        // The older routing and GEMV variants, reachable only through their knobs (so the
        // AMD code objects have no kernel that never ran).
        (
            &amd,
            "gfx942",
            &[("MXMOE_HIP_ROUTE", "v3"), ("MXMOE_HIP_GEMV", "v2c")],
            &[
                "moe_gemv1_v2c_cb4",
                "moe_gemv2_v2c_cb4",
                "mx_route_v2",
                "mx_route_v3",
                "moe_lists_v2",
                "moe_route_lists_v2",
                "moe_route_lists_v3",
            ],
        ),
        (
            &amd,
            "gfx942",
            &[("MXMOE_HIP_ROUTE", "v4"), ("MXMOE_HIP_GEMV", "v2")],
            &[
                "moe_gemv1_v2_cb4",
                "moe_gemv2_v2_cb4",
                "mx_route_v4",
                "moe_route_lists_v4",
                "moe_route_lists_w1",
            ],
        ),
        (
            &nv,
            "sm_90",
            &[],
            &[
                "moe_gemv1_mmab_cb4",
                "moe_gemm1_mma_t64_cb4",
                "mx_nv4_repack",
                // one token of a weight-only layer with a softmax router: gemv1 routes it
                "moe_gemv1_mmab_rt_4_split_cb4",
                // the same with bf16 hidden states (hi only)
                "moe_gemv1_mmab_rt_4_cb4",
                // weight-only 8-bit codes at 8.5 pairs per expert: v1 (v2 up to 4)
                "moe_gemm1_split_cb8",
                "moe_gemm2_split_cb8",
                // the wide routers (the simple ones of weight-only MXFP4 layers with the
                // bf16 conversion folded in)
                "moe_gemv1_mmab_rt_8_split_cb4",
                "moe_gemv1_mmab_rt_32_split_cb4",
                "moe_route_lists_w3x_8",
                "moe_route_lists_w3x_32",
                "mx_route_wx_8",
                "mx_route_wx_32",
                "mx_route_w_8",
                "mx_route_w_32",
                "moe_route_lists_w2g_8",
                "moe_route_lists_w2g_32",
                "mx_route_wg_32",
            ],
        ),
        (
            &nv,
            "sm_90",
            // the GEMM from 5 tokens; up to 4 the GEMV, whose gemv1 here does not route
            // (the one-token route + lists kernels with the conversion folded in run instead)
            // (and the codes in the nv4 rows order: hip/nv4.h Nv4Rows)
            &[
                ("MXMOE_HIP_GEMV_PAIRS", "0"),
                ("MXMOE_HIP_GEMV_ROUTED", "0"),
                ("MXMOE_HIP_NV4_ROWS", "1"),
            ],
            &[
                "mx_nv4_rows",
                "moe_gemv1_mmab_cb4",
                "moe_gemm1_mma_t16_split_cb4",
                "moe_gemm2_v2_t16_cb8",
                "moe_route_lists_w2x_4",
                "moe_route_lists_w2x_8",
                "moe_route_lists_w2x_32",
            ],
        ),
        (
            &nv,
            "sm_90",
            &[("MXMOE_HIP_GEMM", "v2"), ("MXMOE_HIP_GEMV", "v3")],
            &["moe_gemm1_v2_t64_cb4", "moe_gemv1_v3_cb4"],
        ),
        (
            &nv,
            "sm_90",
            &[("MXMOE_HIP_GEMV", "mmaw")],
            &["moe_gemv1_mmaw_cb4"],
        ),
        // The wgmma GEMM (sm_90a; hip/gemm_wgmma.h) on every MoE case (the emulation also
        // checks that a warpgroup's warps issue the same wgmma instructions).
        (
            &nv,
            "sm_90",
            &[
                ("MXMOE_HIP_GEMV_PAIRS", "0"),
                ("MXMOE_HIP_MMA_VARIANT", "wg256"),
            ],
            &[
                "moe_gemm1_mma_t64_wg256_cb4",
                "moe_gemm2_mma_t64_split_wg256_cb4",
                "moe_gemm1_mma_t32_wg256_cb4",
                "moe_gemm1_mma_t16_wg256_cb4",
                "moe_gemm2_mma_t16_split_wg256_cb4",
            ],
        ),
        // The same on activations in the c16 order copied by cp.async (wg256c; gemm1's
        // converted by mx_p8_to_c16, gemm2's written so by gemm1), codes in the nv4 rows order.
        (
            &nv,
            "sm_90",
            &[
                ("MXMOE_HIP_GEMV_PAIRS", "0"),
                ("MXMOE_HIP_MMA_VARIANT", "wg256c"),
                ("MXMOE_HIP_NV4_ROWS", "1"),
            ],
            &[
                "mx_nv4_rows",
                "mx_p8_to_c16",
                "moe_gemm1_mma_t64_wg256c_cb4",
                "moe_gemm2_mma_t64_split_wg256c_cb4",
                "moe_gemm1_mma_t32_wg256c_cb4",
                "moe_gemm1_mma_t16_wg256c_cb4",
                "moe_gemm2_mma_t16_split_wg256c_cb4",
            ],
        ),
    ];
    // (suite, filter, cases): the quick suite, or the full suite's MoE cases of K = 384 / 512
    // (3-4 K steps of 128: the GEMMs' cp.async rings turn over).
    let quick = check::cases(Suite::Quick).len();
    let multi_step = check::cases(Suite::Full)
        .iter()
        .filter(|c| c.id.contains("h512"))
        .count();
    assert!(
        multi_step >= 10,
        "the full suite's h512 MoE cases: {multi_step}"
    );
    let check_run = |lib: &std::path::Path,
                     arch: &str,
                     (suite, filter, n): (&str, &str, usize),
                     knobs: &[(&str, &str)],
                     must_run: &[&str]| {
        let run = Command::new(env!("CARGO_BIN_EXE_mxmoe"))
            .args([
                "check",
                "--backend",
                "hip",
                "--suite",
                suite,
                "--filter",
                filter,
            ])
            .env("MXMOE_HIP_LIBRARY", lib)
            .env("MXMOE_HIP_EMU_ARCH", arch)
            .env("MXMOE_HIP_EMU_STATS", "1")
            .env("MXMOE_REQUIRE_HIP", "1")
            .envs(knobs.iter().copied())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&run.stdout);
        let err = String::from_utf8_lossy(&run.stderr);
        let what = format!("{arch} {suite} {filter:?} {knobs:?}");
        println!("{what}:\n{text}\n{err}");
        assert!(
            run.status.success(),
            "{what}: mxmoe check failed:\n{text}\n{err}"
        );
        assert!(
            text.contains("CPU emulation) ("),
            "{what}: not the emulated device:\n{text}"
        );
        assert!(
            text.contains(&format!("kernels: {arch}")),
            "{what}: code object:\n{text}"
        );
        assert!(
            text.contains(&format!(
                "totals: {n} cases, {n} passed, 0 failed, 0 unsupported, 0 skipped"
            )),
            "{what}: not every case passed:\n{text}"
        );
        for k in must_run {
            assert!(
                err.contains(&format!("  {k} ")),
                "{what}: {k} did not run:\n{err}"
            );
        }
    };
    for (lib, arch, knobs, must_run) in runs {
        check_run(lib, arch, ("quick", "", quick), knobs, must_run);
    }
    // `mxmoe bench`'s floor on each driver API: the device-to-device copy (cuMemcpyDtoD_v2 /
    // hipMemcpyDtoD), timed by events and its output checked, is the default floor bandwidth.
    for (lib, arch) in [(&amd, "gfx950"), (&nv, "sm_90")] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("bench.json");
        let run = Command::new(env!("CARGO_BIN_EXE_mxmoe"))
            .args([
                "bench",
                "--backend",
                "hip",
                "--shape",
                "custom",
                "--experts",
                "4",
                "--hidden",
                "64",
                "--inter",
                "64",
                "--top-k",
                "2",
                "--tokens",
                "1",
                "--iters",
                "1",
                "--json",
            ])
            .arg(&json)
            .env("MXMOE_HIP_LIBRARY", lib)
            .env("MXMOE_HIP_EMU_ARCH", arch)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&run.stdout);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{arch} bench:\n{text}\n{err}");
        assert!(
            text.contains("GB/s (measured on this device: a device-to-device copy"),
            "{arch} bench floor:\n{text}"
        );
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let g = v[0]["floor_gbps"].as_f64().unwrap();
        assert!(g.is_finite() && g > 0.0, "{arch}: floor_gbps {g}");
    }
    // The GEMMs' multi-step pipelines with every cp.async landing only at the wait that covers
    // it (MXMOE_HIP_EMU_CPASYNC=late, hip/test/nv_emu.h: a kernel that reads a ring slot before
    // waiting for its copies gets the slot's old bytes), and wg256c's also with the copies
    // landing at once.
    let late = ("MXMOE_HIP_EMU_CPASYNC", "late");
    let forced = ("MXMOE_HIP_GEMV_PAIRS", "0");
    type Pipeline<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    // (wg256 stages through registers, no cp.async; the mma variants share one ring.)
    let pipelines: [Pipeline; 3] = [
        (&[late, forced], &["moe_gemm1_mma_t16_cb4"]),
        (
            &[
                late,
                forced,
                ("MXMOE_HIP_GEMM", "v2"),
                ("MXMOE_HIP_GEMV", "v3"),
            ],
            &["moe_gemm1_v2_t16_cb4"],
        ),
        (
            &[
                late,
                forced,
                ("MXMOE_HIP_MMA_VARIANT", "wg256c"),
                ("MXMOE_HIP_NV4_ROWS", "1"),
            ],
            &["moe_gemm1_mma_t16_wg256c_cb4", "mx_p8_to_c16"],
        ),
    ];
    for (knobs, must_run) in pipelines {
        check_run(&nv, "sm_90", ("full", "h512", multi_step), knobs, must_run);
    }
    check_run(
        &nv,
        "sm_90",
        ("full", "h512", multi_step),
        &[forced, ("MXMOE_HIP_MMA_VARIANT", "wg256c")],
        &["moe_gemm2_mma_t16_wg256c_cb4"],
    );
}

/// Ids are unique over every suite and the model shapes, and the ids reports and scripts refer
/// to keep their meaning.
#[test]
fn catalog_ids_are_unique_and_stable() {
    let full = check::cases(Suite::Full);
    let quick = check::cases(Suite::Quick);
    let model = catalog::model_cases();
    let mut seen = HashSet::new();
    for c in full.iter().chain(&model) {
        assert!(seen.insert(c.id.clone()), "duplicate id {}", c.id);
    }
    assert!(quick.len() < full.len());
    assert!(quick.iter().all(|c| seen.contains(&c.id)));
    for id in [
        "quantize/mxfp4/even/special",
        "qdq/mxfp6_e2m3/rceil/edges-k64",
        "quantize/mxint8/floor/amax-sweep-k128",
        "dequantize/mxfp8_e5m2/all-codes",
        "route/sigmoid/e16-k4-g4of2-x2.5-cbias/m17",
        "moe/w_mxfp4_a_mxfp4/silu/e8-h96-i64-k2-bias/m17",
        "moe/w_mxfp4/swigluoai/e4-h2880-i704-k2-topk_softmax-norenorm-bias/m3",
        "moe/w_mxfp4_a_mxfp4/silu/e16-h64-i64-k4-sigmoid-g4of2-x2.5-cbias/m17",
        "moe/w_mxfp4_a_mxfp4/silu/e8-h64-i96-k2-bias/m17/bf16",
        "moe/w_mxfp4/swigluoai/gpt-oss-120b/m1",
        "invalid/moe/nan-logits",
    ] {
        assert!(seen.contains(id), "{id} is not in the catalog");
    }
    // The former wgpu-only exactness tests, now cases on every backend, with routing weights
    // bit for bit: the sigmoid sweep (a sparse one in quick, the dense one in full), the
    // adversarial DeepSeek routing (7 routers x 5 biases x 2 scorings x 2 renormalize), the
    // DeepSeek-V3-shaped layer; and the grouped sigmoid routers of the wide-router cases
    // (256 and 1024 experts).
    let bit_exact = |c: &&Case| {
        matches!(
            c.expect,
            Expect::Route {
                weights: Weights::BitExact
            } | Expect::Moe {
                weights: Weights::BitExact,
                ..
            }
        )
    };
    let quick_ids: HashSet<&str> = quick.iter().map(|c| c.id.as_str()).collect();
    for (id, in_quick) in [
        ("route/sigmoid/e32-k32-norenorm/m2626-sweep8191", true),
        ("route/sigmoid/e32-k32-norenorm/m42233-sweep509", false),
        (
            "route/sigmoid/e16-k4-g4of2-x2.5-cbias-zero/m48-adversarial",
            true,
        ),
        (
            "route/softmax/e256-k32-norenorm-x2.5-cbias-ulp-sub/m48-adversarial",
            true,
        ),
        (
            "moe/w_mxfp4_a_mxfp4/silu/e64-h64-i64-k8-sigmoid-g8of4-x2.5-cbias-eq8to16/m33",
            true,
        ),
        (
            "moe/w_mxfp4_a_mxfp4/silu/e64-h64-i64-k8-sigmoid-g8of4-x2.5-cbias-eq8to16/m9-saturated",
            true,
        ),
        ("route/sigmoid/e1024-k8-g8of4-x2.5-cbias/m5", true),
        (
            "moe/w_mxfp4_a_mxfp4/silu/e1024-h64-i64-k8-sigmoid-g32of4-x2.5-cbias-packed/m17",
            true,
        ),
    ] {
        let c = full.iter().find(|c| c.id == id);
        assert!(
            c.is_some_and(|c| bit_exact(&c)),
            "{id}: not a bit-exact-weights case"
        );
        assert_eq!(quick_ids.contains(id), in_quick, "{id}: suite");
    }
    let adversarial = |s: &[Case]| {
        s.iter()
            .filter(|c| c.id.ends_with("-adversarial") && bit_exact(c))
            .count()
    };
    assert_eq!(adversarial(&quick), 140);
    assert_eq!(full.iter().filter(bit_exact).count(), 151);
    // Every case states an expectation that fits its kind.
    for c in &full {
        let ok = match (&c.kind, &c.expect) {
            (Kind::Route(_), Expect::Route { .. }) | (Kind::Moe(_), Expect::Moe { .. }) => true,
            (Kind::Invalid(_), Expect::Error { .. }) => true,
            (Kind::Quantize { .. } | Kind::Dequantize { .. } | Kind::Qdq { .. }, e) => {
                *e == Expect::BitExact
            }
            _ => false,
        };
        assert!(ok, "{}: {:?}", c.id, c.expect);
    }
}

/// The judge itself: poison, one flipped bit, a NaN, a wrong id and an output off by more than
/// the bound all fail; NaN equals NaN bitwise.
#[test]
fn the_judge_catches_what_it_must() {
    // The call matters only for bit-exact routing weights (their flush exemptions).
    let c = Call::Qdq {
        format: MxFormat::Fp4E2M1,
        mode: ScaleMode::Even,
        x: Vec::new(),
        k: 32,
    };
    let judge = |e: &Expect, got: &Output, want: &Output| judge(e, &c, got, want);
    let want = vec![1.0f32, -0.0, f32::NAN, 3.5];
    let v = |x: &[f32]| Output::Values(x.to_vec());
    assert!(judge(&Expect::BitExact, &v(&want), &v(&want)).is_ok());
    let mut nan2 = want.clone();
    nan2[2] = f32::from_bits(0x7FC0_0001);
    assert!(judge(&Expect::BitExact, &v(&nan2), &v(&want)).is_ok());
    let mut flip = want.clone();
    flip[1] = 0.0;
    assert!(judge(&Expect::BitExact, &v(&flip), &v(&want)).is_err());

    let moe = |out: Vec<f32>, ids: Vec<i32>| {
        Output::Moe(MoeOutput {
            output: out,
            routing: Routing {
                top_k: 1,
                topk_ids: ids,
                topk_weights: vec![0.5, 0.25],
            },
            stages: None,
        })
    };
    let exp = Expect::Moe {
        weights: Weights::Within(Tol::ROUTE_WEIGHTS),
        output: Tol::MOE,
        bf16_output: false,
    };
    let w = moe(vec![1.0, 2.0, -3.0, 4.0], vec![0, 1]);
    assert!(judge(&exp, &moe(vec![1.0, 2.0, -3.0, 4.0], vec![0, 1]), &w).is_ok());
    let poisoned = f32::from_bits(mxmoe::backend::wgpu::POISON);
    let e = judge(&exp, &moe(vec![1.0, poisoned, -3.0, 4.0], vec![0, 1]), &w).unwrap_err();
    assert!(e.contains("poison"), "{e}");
    assert!(judge(&exp, &moe(vec![1.0, 2.0, -3.0, 4.0], vec![1, 0]), &w).is_err());
    assert!(judge(&exp, &moe(vec![1.0, 2.0, -3.0, 4.1], vec![0, 1]), &w).is_err());
    assert!(judge(&exp, &moe(vec![1.0, 2.0, f32::NAN, 4.0], vec![0, 1]), &w).is_err());
    let bf = Expect::Moe {
        weights: Weights::Within(Tol::ROUTE_WEIGHTS),
        output: Tol::MOE_BF16,
        bf16_output: true,
    };
    let e = judge(&bf, &moe(vec![1.0, 2.0, -3.0, 4.0001], vec![0, 1]), &w).unwrap_err();
    assert!(e.contains("bf16"), "{e}");
    assert_eq!(check::rel_l2(&[3.0, 4.0], &[0.0, 0.0]).0, 5.0);
}

/// Bit-exact routing weights: one flipped bit or a normal weight zeroed fails; what an adapter
/// that flushes subnormals may change passes: a subnormal weight come back as zero, and any
/// weight of a renormalized token with a score below `TINY_SCORE` (sigmoid(-100) = 3.7e-44).
#[test]
fn the_judge_of_bit_exact_routing_weights() {
    let exp = Expect::Route {
        weights: Weights::BitExact,
    };
    let call = |renormalize| Call::Route {
        cfg: RouterConfig {
            scoring: Scoring::Sigmoid,
            top_k: 2,
            renormalize,
            ..RouterConfig::default()
        },
        n_experts: 2,
        logits: vec![1.0, -100.0, 2.0, 0.5],
        bias: None,
    };
    let routing = |o: &Output| match o {
        Output::Routing(r) => r.clone(),
        _ => unreachable!(),
    };
    let edit = |r: &Routing, j: usize, f: &dyn Fn(f32) -> f32| {
        let mut r = r.clone();
        r.topk_weights[j] = f(r.topk_weights[j]);
        Output::Routing(r)
    };
    let flip = |x: f32| f32::from_bits(x.to_bits() ^ 1);
    for renormalize in [false, true] {
        let c = call(renormalize);
        let want = reference(&c).unwrap();
        let r = routing(&want);
        assert!(judge(&exp, &c, &want, &want).is_ok());
        // Token 1 (logits 2.0, 0.5): no tiny score, every bit counts.
        assert!(judge(&exp, &c, &edit(&r, 2, &flip), &want).is_err());
        assert!(judge(&exp, &c, &edit(&r, 3, &|_| 0.0), &want).is_err());
        // Token 0: expert 1's score is subnormal.
        let note = judge(&exp, &c, &edit(&r, 1, &|_| 0.0), &want).unwrap();
        if renormalize {
            assert!(note.contains("1 tokens with tiny scores"), "{note}");
            assert!(judge(&exp, &c, &edit(&r, 0, &flip), &want).is_ok());
        } else {
            assert!(r.topk_weights[1].is_subnormal());
            assert!(note.contains("1 subnormal weights flushed"), "{note}");
            assert!(judge(&exp, &c, &edit(&r, 0, &flip), &want).is_err());
            assert!(judge(&exp, &c, &edit(&r, 1, &flip), &want).is_err());
        }
    }
}
