//! The wgpu backend's own knobs (ARCHITECTURE.md "Testing model"). What every backend must
//! compute is compared in `tests/backend_ops.rs` (the case catalog); here are only the
//! wgpu-specific paths and hooks, checked with the catalog's cases and its judge:
//!
//! * the MoE path choice: GEMM and GEMV both run on every quick MoE case of the catalog;
//! * weights split across buffers, batches split across submits, quant ops in chunks;
//! * the pipeline cache, timestamps per pass, poisoning, the adapter list, the bandwidth probe
//!   and a timing report (the last two `#[ignore]`d: diagnostics, not tests).
//!
//! Outputs are POISONED (0x7FC0DEAD) by the backend before every run, so an element a kernel
//! does not write fails. Without an adapter the tests print SKIPPED, and FAIL when
//! `MXMOE_REQUIRE_GPU=1` (CI).

use mxmoe::backend::wgpu::{CoopKernel, GemvConfig, MoePath, WgpuBackend};
use mxmoe::backend::{BackendError, Timing};
use mxmoe::check::catalog::{moe_case, LayerSpec, Tier};
use mxmoe::check::run::{judge, reference, Call, Materializer, Output};
use mxmoe::check::{self, first_bit_mismatch, inputs, Case, Expect, Suite, Weights};
use mxmoe::format::{MxFormat, MxTensor, ScaleMode};
use mxmoe::moe::synth::{synth_batch, SynthSpec};
use mxmoe::moe::{Accumulate, Activation, Intermediate, MoeOptions};
use mxmoe::scheme::Scheme;
use std::sync::OnceLock;
use std::time::Instant;

static BACKEND: OnceLock<Option<WgpuBackend>> = OnceLock::new();

fn backend() -> Option<&'static WgpuBackend> {
    BACKEND
        .get_or_init(|| match WgpuBackend::new(None) {
            Ok(b) => {
                b.set_poison(true);
                eprintln!("wgpu adapter: {}", b.adapter());
                Some(b)
            }
            Err(e) => {
                if check::require_gpu() {
                    panic!("MXMOE_REQUIRE_GPU=1 but no wgpu adapter: {e}");
                }
                None
            }
        })
        .as_ref()
}

macro_rules! gpu {
    ($name:expr) => {
        match backend() {
            Some(b) => b,
            None => {
                println!(
                    "SKIPPED {}: no wgpu adapter (set MXMOE_REQUIRE_GPU=1 to fail)",
                    $name
                );
                return;
            }
        }
    };
}

/// A backend of its own (not the shared one: the test changes knobs), or SKIPPED as [`gpu!`].
macro_rules! fresh_gpu {
    ($name:expr) => {{
        let _ = gpu!($name);
        WgpuBackend::new(None).unwrap()
    }};
}

fn spec(scheme: Scheme, act: Activation, e: usize, h: usize, i: usize, k: usize) -> SynthSpec {
    let mut s = SynthSpec::new(scheme, e, h, i, k);
    s.activation = act;
    s
}

/// Run a catalog MoE case on both expert paths (GEMM and GEMV) of one prepared layer and
/// judge each against the CPU reference with the case's expectation.
fn check_paths(b: &WgpuBackend, mat: &mut Materializer, case: &Case) {
    check_on(b, mat, case, &[MoePath::Gemm, MoePath::Gemv]);
}

/// Run a catalog MoE case on the given expert paths and judge each against the CPU reference.
fn check_on(b: &WgpuBackend, mat: &mut Materializer, case: &Case, paths: &[MoePath]) {
    let call = mat
        .call(case)
        .unwrap_or_else(|e| panic!("{}: {e}", case.id));
    let want = reference(&call).unwrap_or_else(|e| panic!("{}: reference: {e}", case.id));
    let Call::Moe {
        layer,
        hidden,
        logits,
        opts,
    } = &call
    else {
        panic!("{} is not a MoE case", case.id)
    };
    let g = b
        .prepare(layer)
        .unwrap_or_else(|e| panic!("{}: {e}", case.id));
    for &path in paths {
        let t = Instant::now();
        let got = b
            .moe_path(&g, hidden, logits, *opts, path, false)
            .unwrap_or_else(|e| panic!("{}/{path:?}: {e}", case.id))
            .0;
        match judge(&case.expect, &call, &Output::Moe(got), &want) {
            Ok(note) => println!("OK   {}/{path:?} {:.1?} {note}", case.id, t.elapsed()),
            Err(e) => panic!("{}/{path:?}: {e}", case.id),
        }
    }
}

/// GEMM and GEMV (the choice `MoePath::Auto` makes by the number of token-expert pairs) on
/// every quick MoE case of the catalog: both paths must satisfy the case, whichever Auto picks
/// (the DeepSeek-V3-shaped layer included: routing weights bit for bit on both).
#[test]
fn moe_gemm_and_gemv_paths_on_catalog_cases() {
    let b = gpu!("moe_gemm_and_gemv_paths_on_catalog_cases");
    let mut mat = Materializer::default();
    let cases: Vec<Case> = check::cases(Suite::Quick)
        .into_iter()
        .filter(Case::is_moe)
        .collect();
    assert!(cases.len() > 50);
    let deepseek = "moe/w_mxfp4_a_mxfp4/silu/e64-h64-i64-k8-sigmoid-g8of4-x2.5-cbias-eq8to16/";
    for m in ["m1", "m5", "m33", "m9-saturated"] {
        let id = format!("{deepseek}{m}");
        let c = cases.iter().find(|c| c.id == id);
        assert!(
            c.is_some_and(|c| matches!(
                c.expect,
                Expect::Moe {
                    weights: Weights::BitExact,
                    ..
                }
            )),
            "{id}: not among the quick MoE cases with bit-exact routing weights"
        );
    }
    for c in &cases {
        check_paths(b, &mut mat, c);
    }
}

/// The prefill GEMM's kernels: the tiled f32 GEMM runs everywhere (the test above); where the
/// adapter offers cooperative matrices (f16 16x16x16, f32 accumulation) and passed
/// `coop_check`, the cooperative GEMM must satisfy every quick MoE case on the GEMM path too
/// (the default kernel, k64pw where its checks passed, and k64, k32, k64p where k64 passed
/// `coop64_check`), and so must the tiled GEMM
/// when switched back. An adapter without them (lavapipe) must
/// refuse the cooperative GEMM with a reason: never a silent pass. Own backend instance: the
/// choice is per device context.
#[test]
fn gemm_tiled_and_coop_on_catalog_cases() {
    gpu!("gemm_tiled_and_coop_on_catalog_cases");
    let b = WgpuBackend::new(None).expect("second context on the same adapter");
    b.set_poison(true);
    if !b.coop_gemm() {
        let why = b
            .set_coop_gemm(true)
            .expect_err("set_coop_gemm(true) accepted on an adapter that did not enable it");
        assert!(why.starts_with("tiled"), "{why}");
        assert!(!b.coop_gemm());
        b.set_coop_k64(true)
            .expect_err("set_coop_k64(true) accepted on an adapter without the cooperative GEMM");
        for k in [CoopKernel::K64p, CoopKernel::K64pw] {
            let e = b.set_coop_pre(Some(k)).expect_err(
                "a pre-pass kernel accepted on an adapter without the cooperative GEMM",
            );
            assert!(e.contains(k.name()), "{e}");
        }
        b.set_coop_pre(None).unwrap();
        println!("cooperative GEMM not available ({why}); the tiled GEMM is covered above");
        return;
    }
    // Both cooperative kernels where k64 passed its check (it is then the default).
    let k64 = b.coop_k64();
    println!("cooperative GEMM kernel k64: {k64}");
    let mut mat = Materializer::default();
    let cases: Vec<Case> = check::cases(Suite::Quick)
        .into_iter()
        .filter(Case::is_moe)
        .collect();
    assert!(cases.len() > 50);
    // The default kernel: k64pw where k64 and k64p's check passed (else k64, else k32).
    let default = b.coop_kernel();
    println!("cooperative GEMM default kernel: {}", default.name());
    for c in &cases {
        b.set_coop_gemm(true).unwrap();
        check_on(&b, &mut mat, c, &[MoePath::Gemm]);
        if k64 {
            // k64 (no pre-passes), k32, then the pre-pass kernels k64p (A from storage) and
            // k64pw (A copied into workgroup memory), then back to the default.
            b.set_coop_pre(None).unwrap();
            assert_eq!(b.coop_kernel(), CoopKernel::K64);
            check_on(&b, &mut mat, c, &[MoePath::Gemm]);
            b.set_coop_k64(false).unwrap();
            assert_eq!(b.coop_kernel(), CoopKernel::K32);
            check_on(&b, &mut mat, c, &[MoePath::Gemm]);
            b.set_coop_k64(true).unwrap();
            for k in [CoopKernel::K64p, CoopKernel::K64pw] {
                b.set_coop_pre(Some(k)).unwrap();
                assert_eq!(b.coop_kernel(), k);
                check_on(&b, &mut mat, c, &[MoePath::Gemm]);
            }
            b.set_coop_pre(default.prepass().then_some(default))
                .unwrap();
            assert_eq!(b.coop_kernel(), default);
        }
        b.set_coop_gemm(false).unwrap();
        check_on(&b, &mut mat, c, &[MoePath::Gemm]);
    }
}

/// The decode GEMV's layouts: the workgroup-memory reduction every adapter can run, and where
/// the adapter has fixed-size subgroups (lavapipe: 8 lanes; NVIDIA: 32) the subgroupAdd
/// layout, each with and without prefetching the next block and with blocks or words per
/// lane, with gemv1 building the row lists itself or the `lists` pass first, the quick MoE cases
/// dealt round robin over the layouts. An adapter with SUBGROUP must
/// accept the subgroup layouts (no silent fallback to the shared one). Own backend instance: the
/// layout is per device context.
#[test]
fn gemv_layouts_on_catalog_cases() {
    let b = fresh_gpu!("gemv_layouts_on_catalog_cases");
    b.set_poison(true);
    // (subgroup, prefetch, words, gemv1 builds the lists itself, subgroups per lane group)
    let mut layouts = vec![
        (false, false, false, true, 1),
        (false, true, true, false, 1),
    ];
    match b.subgroup_size() {
        Some(n) => {
            println!("subgroup size {n}");
            layouts.extend([
                (true, false, false, true, 1),
                (true, true, false, true, 1),
                (true, false, true, false, 1),
                (true, true, true, true, 1),
                (true, true, true, true, 2),
                (true, false, false, false, 4),
            ]);
        }
        None => println!(
            "UNSUPPORTED subgroup GEMV layouts: {}: no fixed-size subgroups",
            b.adapter()
        ),
    }
    let cases: Vec<Case> = check::cases(Suite::Quick)
        .into_iter()
        .filter(Case::is_moe)
        .collect();
    let mut mat = Materializer::default();
    // Each layout runs every `step`-th case, starting at its own offset: every case runs on one
    // layout, round robin (the default layout also runs every case in
    // moe_gemm_and_gemv_paths_on_catalog_cases), so the test costs one GEMV pass of the catalog.
    let step = layouts.len();
    for (li, &(subgroup, prefetch, words, own, split)) in layouts.iter().enumerate() {
        let want = GemvConfig {
            subgroup,
            prefetch,
            words,
            split,
            ..GemvConfig::SHARED
        };
        let cfg = b
            .set_gemv_layout(want)
            .unwrap_or_else(|e| panic!("layout {want:?}: {e}"));
        assert_eq!(
            (cfg.subgroup, cfg.prefetch, cfg.words, cfg.split),
            (subgroup, prefetch, words, split),
            "{cfg:?}"
        );
        if let Some(n) = b.subgroup_size().filter(|_| subgroup) {
            assert_eq!(cfg.lanes, n * split, "{cfg:?}");
        }
        b.set_gemv_own_lists(own);
        // Up to gemv1's workgroup arrays, so every quick case runs the builder when `own`.
        b.set_gemv_own_lists_max(256);
        println!("layout {cfg:?}, gemv1 builds the lists: {own}");
        for c in cases.iter().skip(li % step).step_by(step) {
            check_on(&b, &mut mat, c, &[MoePath::Gemv]);
        }
    }
}

/// The one-row pipelines of one-token forwards (`GemvConfig::one_row`, GEMV_ONE_ROW: the FP4
/// paths compile the one-token code only) give the same bits as the pipelines that hold both
/// paths: on K with many steps per lane (H 2880: 11+ words per lane) and with fewer words than
/// lanes (H 64), words and 32-block layouts, both reductions where the adapter has subgroups,
/// and 3 and 5 tokens (where one_row must change nothing: those pipelines are not specialized).
/// Own backend instance.
#[test]
fn gemv_one_row_matches_general_pipelines() {
    let b = fresh_gpu!("gemv_one_row_matches_general_pipelines");
    b.set_poison(true);
    let opts = MoeOptions::default();
    let mut reductions = vec![false];
    if b.subgroup_size().is_some() {
        reductions.push(true);
    }
    for (e, h, i, k) in [(4, 2880, 704, 2), (8, 64, 96, 2)] {
        let layer = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::SwigluOai, e, h, i, k))
            .build()
            .unwrap();
        assert_eq!(layer.weights.w13.format, MxFormat::Fp4E2M1, "an FP4 layer");
        let g = b.prepare(&layer).unwrap();
        for &subgroup in &reductions {
            for words in [true, false] {
                for (m, seed) in [(1, 81), (3, 82), (1, 83), (5, 84)] {
                    let (hs, lg) = synth_batch(m, h, e, seed);
                    let mut outs = Vec::new();
                    for one_row in [false, true] {
                        let want = GemvConfig {
                            subgroup,
                            prefetch: true,
                            words,
                            one_row,
                            ..GemvConfig::SHARED
                        };
                        let cfg = b.set_gemv_layout(want).unwrap();
                        assert_eq!((cfg.one_row, cfg.subgroup), (one_row, subgroup), "{cfg:?}");
                        outs.push(
                            b.moe_path(&g, &hs, &lg, opts, MoePath::Gemv, false)
                                .unwrap()
                                .0,
                        );
                    }
                    assert_eq!(
                        first_bit_mismatch(&outs[1].output, &outs[0].output),
                        None,
                        "e {e} h {h} m {m} subgroup {subgroup} words {words}"
                    );
                }
            }
        }
    }
}

/// Weights split across several buffers (a chunk-size override far below the binding limit):
/// the layer must give the same result as unsplit; 40 tokens need more than one binding of
/// activations, so several submits; one expert larger than a binding is a clear OutOfMemory;
/// the quant ops chunk too. Uses its own backend instance, so the override does not leak into
/// the other tests.
#[test]
fn moe_weights_split_across_buffers() {
    let b = fresh_gpu!("moe_weights_split_across_buffers");
    b.set_poison(true);
    let l = LayerSpec::new(spec(Scheme::OCP_MX[3], Activation::Silu, 8, 64, 64, 4));
    let layer = l.build().unwrap();
    let per_expert = (layer.weights.w13.data.len() / 8).max(layer.weights.w2.data.len() / 8) as u64;
    b.set_max_chunk_bytes(per_expert * 3);
    let g = b.prepare(&layer).unwrap();
    assert_eq!(g.chunks(), 3, "8 experts, 3 per chunk");
    let mut mat = Materializer::default();
    check_paths(&b, &mut mat, &moe_case(Tier::Quick, &l, 17, 61));
    check_paths(&b, &mut mat, &moe_case(Tier::Quick, &l, 40, 62));
    if b.has_timestamps() {
        let (hs, logits) = synth_batch(40, 64, 8, 62);
        let (_, times) = b
            .moe_path(&g, &hs, &logits, MoeOptions::default(), MoePath::Gemm, true)
            .unwrap();
        let times = times.unwrap_or_default();
        let submits = times.iter().filter(|(n, _)| n == "route").count();
        assert_eq!(submits, 3, "40 tokens at 18 per binding: {times:?}");
    }
    // One expert larger than a binding: a clear OutOfMemory naming sizes.
    b.set_max_chunk_bytes(per_expert - 4);
    match b.prepare(&layer) {
        Err(BackendError::OutOfMemory(msg)) => assert!(msg.contains("MiB"), "{msg}"),
        other => panic!("expected OutOfMemory, got {:?}", other.map(|g| g.chunks())),
    }
    // Quant ops chunk too: 8 blocks per chunk.
    b.set_max_chunk_bytes(8 * 128);
    let x = &inputs::edges(MxFormat::Fp6E2M3, 3)[..32 * 100];
    let cpu = mxmoe::format::qdq_slice(MxFormat::Fp6E2M3, ScaleMode::RCeil, x, 32).unwrap();
    let gpu = b.qdq(MxFormat::Fp6E2M3, ScaleMode::RCeil, x, 32).unwrap();
    assert_eq!(first_bit_mismatch(&gpu, &cpu), None, "qdq chunked");
    let t = MxTensor::quantize(MxFormat::Fp4E2M1, ScaleMode::Even, x, &[100, 32]).unwrap();
    let tg = b
        .quantize(MxFormat::Fp4E2M1, ScaleMode::Even, x, &[100, 32])
        .unwrap();
    assert_eq!(t, tg, "quantize chunked");
    assert_eq!(
        first_bit_mismatch(&b.dequantize(&t).unwrap(), &t.dequantize()),
        None,
        "dequantize chunked"
    );
}

/// One expert dispatch reads several weight chunks (shaders/moe_weights_multi.wgsl). By default
/// only GEMV forwards of at most 256 token-expert pairs do (timestamps count the dispatches),
/// and with `set_chunks_per_pass` every forward: a layer of
/// 8 local experts in chunks of 3 (3, 3, 2 experts; `set_max_chunk_experts`) run with 1 to 4
/// chunks per dispatch gives, on both expert paths and at 1, 5 and 40 tokens, the bits of the
/// one-chunk-per-dispatch run (the same sums over the same weights), and every run satisfies
/// the catalog case against the CPU reference; timestamps show ceil(3 / per-pass) dispatches
/// of each expert stage. Layers: FP4 weights (the GEMV's vec4 and word loads), FP6 weights
/// (the code-table octets), FP4 weight-only (gpt-oss SwiGLU), and an expert map (12 router
/// experts, 8 local). Poisoned outputs: a tile no dispatch covers fails.
#[test]
fn moe_chunks_per_pass() {
    let b = fresh_gpu!("moe_chunks_per_pass");
    b.set_poison(true);
    b.set_max_chunk_experts(3);
    if b.has_timestamps() {
        // The default (no knob): one dispatch over the chunks for GEMV forwards of at most
        // MULTI_CHUNK_MAX_PAIRS pairs, one per chunk for larger GEMV forwards and the GEMM.
        let l = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, 64, 64, 2));
        let g = b.prepare(&l.build().unwrap()).unwrap();
        assert_eq!(g.chunks(), 3);
        for (m, path, want) in [
            (1, MoePath::Gemv, 1),
            (128, MoePath::Gemv, 1),
            (129, MoePath::Gemv, 3),
            (1, MoePath::Gemm, 3),
            (40, MoePath::Gemm, 3),
        ] {
            let (hs, lg) = synth_batch(m, 64, 8, 80);
            let times = b
                .moe_path(&g, &hs, &lg, MoeOptions::default(), path, true)
                .unwrap()
                .1
                .unwrap_or_default();
            let stage1 = times
                .iter()
                .filter(|(n, _)| n.ends_with("gemv1") || n.ends_with("gemm1"))
                .count();
            assert_eq!(stage1, want, "m {m} {path:?}: {times:?}");
        }
    }
    let mut mat = Materializer::default();
    let layers = [
        LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, 64, 96, 2)),
        LayerSpec::new(spec(Scheme::OCP_MX[3], Activation::Silu, 8, 96, 64, 3)),
        LayerSpec::new(spec(Scheme::ALL[5], Activation::SwigluOai, 8, 64, 64, 4)),
        {
            let mut l = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, 64, 64, 2));
            l.router_experts = Some(12);
            l
        },
    ];
    for (li, l) in layers.iter().enumerate() {
        let layer = l.build().unwrap();
        let g = b.prepare(&layer).unwrap();
        assert_eq!(g.chunks(), 3, "layer {li}: 8 experts, 3 per chunk");
        for (m, seed) in [(1, 81), (5, 82), (40, 83)] {
            let case = moe_case(Tier::Quick, l, m, seed);
            let (hs, lg) = synth_batch(m, layer.config.hidden, layer.config.n_experts, seed);
            for path in [MoePath::Gemm, MoePath::Gemv] {
                let mut want = None;
                for per_pass in 1..=4 {
                    if let Err(e) = b.set_chunks_per_pass(per_pass) {
                        assert!(per_pass > 1, "{e}");
                        println!("UNSUPPORTED {per_pass} chunks per pass: {e}");
                        continue;
                    }
                    check_on(&b, &mut mat, &case, &[path]);
                    let (got, times) = b
                        .moe_path(
                            &g,
                            &hs,
                            &lg,
                            MoeOptions::default(),
                            path,
                            b.has_timestamps(),
                        )
                        .unwrap();
                    let what = format!("layer {li} m {m} {path:?} {per_pass} per pass");
                    match &want {
                        None => want = Some(got),
                        Some(w) => {
                            let w: &mxmoe::moe::MoeOutput = w;
                            assert_eq!(first_bit_mismatch(&got.output, &w.output), None, "{what}");
                            assert_eq!(got.routing.topk_ids, w.routing.topk_ids, "{what}");
                        }
                    }
                    if let Some(times) = times {
                        let stage1 = times
                            .iter()
                            .filter(|(n, _)| n.ends_with("gemv1") || n.ends_with("gemm1"))
                            .count();
                        assert_eq!(stage1, g.dispatches(per_pass), "{what}: {times:?}");
                        assert_eq!(g.dispatches(per_pass), 3usize.div_ceil(per_pass));
                    }
                }
            }
        }
    }
    b.set_chunks_per_pass(1).unwrap();
    b.set_max_chunk_experts(0);
}

/// The pipeline cache: a second run of the same ops builds no new pipeline. Uses its own
/// backend instance (the cache is per device context; other tests run concurrently).
#[test]
fn pipeline_cache_builds_each_pipeline_once() {
    let b = &fresh_gpu!("pipeline_cache_builds_each_pipeline_once");
    b.set_poison(true);
    // Start-up may build the FP4 register-decode and the subgroup-layout check pipelines (and
    // nothing else).
    let at_start = b.pipeline_count();
    assert!(at_start <= 2, "{at_start} pipelines before any op");
    let l = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, 64, 64, 2));
    let layer = l.build().unwrap();
    let g = b.prepare(&layer).unwrap();
    let (hs, logits) = synth_batch(17, 64, 8, 3);
    let x = inputs::random(4, 64, 1);
    let run = || {
        for path in [MoePath::Gemm, MoePath::Gemv] {
            b.moe_path(&g, &hs, &logits, MoeOptions::default(), path, false)
                .unwrap();
        }
        b.qdq(MxFormat::Fp4E2M1, ScaleMode::Even, &x, 64).unwrap();
    };
    run();
    let n = b.pipeline_count();
    assert!(n > at_start);
    run();
    assert_eq!(b.pipeline_count(), n, "pipelines rebuilt on a second run");
}

/// The GEMV's two FP4 decodes (from bits in registers, through the workgroup-memory table) give
/// the same bits on the FP4-weight catalog MoE cases; the start-up check's choice is one of them.
#[test]
fn fp4_decode_register_and_table_agree() {
    let b = fresh_gpu!("fp4_decode_register_and_table_agree");
    eprintln!("{:?}", b.notes());
    for (scheme, act) in [
        (Scheme::OCP_MX[0], Activation::Silu),
        (Scheme::new(MxFormat::Fp4E2M1, None), Activation::SwigluOai),
    ] {
        let layer = LayerSpec::new(spec(scheme, act, 8, 96, 64, 2))
            .build()
            .unwrap();
        let g = b.prepare(&layer).unwrap();
        for m in [1usize, 3, 17] {
            let (hs, logits) = synth_batch(m, 96, 8, 11 + m as u64);
            let mut outs = Vec::new();
            for on in [false, true] {
                b.set_fp4_register_decode(on);
                let (o, _) = b
                    .moe_path(
                        &g,
                        &hs,
                        &logits,
                        MoeOptions::default(),
                        MoePath::Gemv,
                        false,
                    )
                    .unwrap();
                outs.push(o.output);
            }
            assert_eq!(
                first_bit_mismatch(&outs[0], &outs[1]),
                None,
                "{scheme}/{act} M = {m}: table and register decode differ"
            );
        }
    }
}

/// The forward cache (a layer keeps its last forward's buffers and bind groups): forwards that
/// alternate batch sizes, paths and GEMV layouts on one layer give the same bits as each first
/// forward of its kind on a fresh layer.
#[test]
fn forward_cache_reuse_matches_fresh() {
    let b = fresh_gpu!("forward_cache_reuse_matches_fresh");
    b.set_poison(true);
    let layer = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, 64, 64, 2))
        .build()
        .unwrap();
    let batches: Vec<_> = [(3, 11), (5, 12), (1, 13)]
        .iter()
        .map(|&(m, seed)| synth_batch(m, 64, 8, seed))
        .collect();
    let opts = MoeOptions::default();
    let run = |g: &mxmoe::backend::wgpu::GpuLayer, i: usize, path: MoePath| {
        let (hs, lg) = &batches[i];
        b.moe_path(g, hs, lg, opts, path, false).unwrap().0
    };
    // Each (batch, path) once on its own fresh layer: the expected bits. Batches inner, so that
    // successive forwards below differ in the batch size alone (same path and pipelines).
    let mut fresh = Vec::new();
    for path in [MoePath::Gemv, MoePath::Gemm] {
        for i in 0..batches.len() {
            let g = b.prepare(&layer).unwrap();
            fresh.push(((i, path), run(&g, i, path)));
        }
    }
    // Then all of them on one layer, each twice in a row (the second reuses the cache), in an
    // order that changes the key every time, with a GEMV layout change in the middle.
    let g = b.prepare(&layer).unwrap();
    let base = b.gemv_layout();
    for round in 0..2 {
        if round == 1 {
            let other = GemvConfig {
                prefetch: !base.prefetch,
                ..base
            };
            b.set_gemv_layout(other).unwrap();
        }
        for ((i, path), want) in &fresh {
            for _ in 0..2 {
                let got = run(&g, *i, *path);
                assert_eq!(
                    first_bit_mismatch(&got.output, &want.output),
                    None,
                    "batch {i} {path:?} round {round}"
                );
                assert_eq!(got.routing.topk_ids, want.routing.topk_ids);
            }
        }
    }
    b.set_gemv_layout(base).unwrap();
}

/// gemv2's fused combine (its last workgroup per 64-column slice sums the slots; up to 16
/// tokens) gives the combine pass's bits: weights in one buffer and in 3 chunks (a slice's last
/// arrival is counted over every chunk's dispatch), H = 96 (a partial slice), 1 to 17 tokens
/// (17: past the limit, both run the combine pass), each fused forward twice (the slice
/// counters must be back at zero), and a batch whose every pair is on another rank (no tile at
/// all: the output is zeros, written by no counting workgroup). Outputs are poisoned, so an
/// element the fused path leaves unwritten fails. Timed forwards have no `moe/combine` pass
/// exactly when fused.
#[test]
fn gemv_fused_combine_matches_combine_pass() {
    let b = fresh_gpu!("gemv_fused_combine_matches_combine_pass");
    b.set_poison(true);
    let opts = MoeOptions::default();
    let l = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, 96, 64, 2));
    let layer = l.build().unwrap();
    let per_expert = (layer.weights.w13.data.len() / 8).max(layer.weights.w2.data.len() / 8) as u64;
    for chunked in [false, true] {
        b.set_max_chunk_bytes(if chunked { per_expert * 3 } else { 0 });
        let g = b.prepare(&layer).unwrap();
        assert_eq!(g.chunks(), if chunked { 3 } else { 1 });
        for (m, seed) in [(1, 71), (3, 72), (16, 73), (17, 74)] {
            let (hs, lg) = synth_batch(m, 96, 8, seed);
            let run = |fuse: bool, timed: bool| {
                b.set_fused_combine(fuse);
                b.moe_path(&g, &hs, &lg, opts, MoePath::Gemv, timed)
                    .unwrap()
            };
            let want = run(false, false).0;
            for rep in 0..2 {
                let got = run(true, false).0;
                assert_eq!(
                    first_bit_mismatch(&got.output, &want.output),
                    None,
                    "m {m} chunked {chunked} forward {rep}"
                );
                assert_eq!(got.routing.topk_ids, want.routing.topk_ids);
            }
            if b.has_timestamps() {
                for fuse in [false, true] {
                    let times = run(fuse, true).1.unwrap_or_default();
                    let combine = times.iter().any(|(n, _)| n == "moe/combine");
                    assert_eq!(combine, !fuse || m > 16, "m {m} fuse {fuse}: {times:?}");
                }
            }
        }
    }
    b.set_max_chunk_bytes(0);
    // Every pair remote: 16 router experts, the even ones local; each token's largest logit is
    // an odd expert and top_k is 1.
    let mut l = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, 64, 64, 1));
    l.router_experts = Some(16);
    let layer = l.build().unwrap();
    let g = b.prepare(&layer).unwrap();
    let m = 3;
    let (hs, _) = synth_batch(m, 64, 16, 75);
    let mut lg = vec![0.0f32; m * 16];
    for t in 0..m {
        lg[t * 16 + 2 * t + 1] = 4.0;
    }
    let run = |fuse: bool| {
        b.set_fused_combine(fuse);
        b.moe_path(&g, &hs, &lg, opts, MoePath::Gemv, false)
            .unwrap()
            .0
    };
    let want = run(false);
    assert!(
        want.output.iter().all(|&v| v == 0.0),
        "all pairs remote: zeros"
    );
    assert_eq!(
        first_bit_mismatch(&run(true).output, &want.output),
        None,
        "all remote"
    );
    b.set_fused_combine(true);
}

/// A batch whose activations reach `WRITE_PAR_MIN` bytes is uploaded in pieces from several
/// threads: its output rows must equal those of the same tokens run in small batches (one
/// write each), bit for bit (GEMM path for both; a row's result does not depend on the batch).
#[test]
fn large_upload_in_pieces_matches_small_batches() {
    let b = gpu!("large_upload_in_pieces_matches_small_batches");
    let h = 64;
    let layer = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, h, 64, 2))
        .build()
        .unwrap();
    // 20000 tokens x 64 x 4 bytes = 5.1 MB of hidden states (above WRITE_PAR_MIN = 4 MiB).
    let m = 20000;
    assert!(m * h * 4 >= mxmoe::backend::wgpu::WRITE_PAR_MIN);
    let (hs, logits) = synth_batch(m, h, 8, 21);
    let g = b.prepare(&layer).unwrap();
    let opts = MoeOptions::default();
    let big = b
        .moe_path(&g, &hs, &logits, opts, MoePath::Gemm, false)
        .unwrap()
        .0;
    for t0 in [0, 7777, m - 50] {
        let t1 = t0 + 50;
        let small = b
            .moe_path(
                &g,
                &hs[t0 * h..t1 * h],
                &logits[t0 * 8..t1 * 8],
                opts,
                MoePath::Gemm,
                false,
            )
            .unwrap()
            .0;
        assert_eq!(
            first_bit_mismatch(&small.output, &big.output[t0 * h..t1 * h]),
            None,
            "tokens {t0}..{t1}"
        );
        assert_eq!(small.routing.topk_ids, big.routing.topk_ids[t0 * 2..t1 * 2]);
    }
}

/// Poisoning fills outputs before a run; it must never leak into a result: the same forward
/// (split across submits) and QDQ with and without it give the same bits.
#[test]
fn poison_does_not_leak_into_results() {
    let b = fresh_gpu!("poison_does_not_leak_into_results");
    let layer = LayerSpec::new(spec(Scheme::OCP_MX[1], Activation::SwigluOai, 8, 64, 64, 2))
        .build()
        .unwrap();
    let (hs, logits) = synth_batch(40, 64, 8, 5);
    let x = inputs::edges(MxFormat::Fp8E4M3, 1);
    let mut outs = Vec::new();
    for poison in [false, true] {
        b.set_poison(poison);
        let g = b.prepare(&layer).unwrap();
        let o = b
            .moe(&g, &hs, &logits, MoeOptions::default(), false)
            .unwrap()
            .0;
        let q = b.qdq(MxFormat::Fp8E4M3, ScaleMode::Even, &x, 64).unwrap();
        outs.push((o.output, o.routing.topk_ids, q));
    }
    assert_eq!(first_bit_mismatch(&outs[1].0, &outs[0].0), None, "moe");
    assert_eq!(outs[1].1, outs[0].1, "ids");
    assert_eq!(first_bit_mismatch(&outs[1].2, &outs[0].2), None, "qdq");
}

/// Timing hooks for benchmarks: a timed forward gives the same output and, with
/// TIMESTAMP_QUERY, one non-negative duration per pass (the GEMV path at decode sizes has no
/// `lists` pass: gemv1 builds the lists, and where the combine is fused no `combine` pass; the
/// GEMM path has both).
#[test]
fn moe_timed_forward() {
    let b = gpu!("moe_timed_forward");
    let layer = LayerSpec::new(SynthSpec::new(Scheme::OCP_MX[0], 8, 64, 64, 2))
        .build()
        .unwrap();
    let (hs, logits) = synth_batch(5, 64, 8, 3);
    let g = b.prepare(&layer).unwrap();
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::F32,
        taps: false,
        profile: mxmoe::format::ProfileId::Contract,
    };
    let plain = b
        .moe_path(&g, &hs, &logits, opts, MoePath::Gemv, false)
        .unwrap()
        .0;
    let (timed, times) = b
        .moe_path(&g, &hs, &logits, opts, MoePath::Gemv, true)
        .unwrap();
    let times = times.unwrap_or_default();
    assert_eq!(plain.output, timed.output);
    eprintln!("pass times (ms): {times:?}");
    if b.has_timestamps() {
        // At decode sizes gemv1 builds the row lists itself (no `lists` pass) and, where the
        // combine is fused (MXMOE_WGPU_FUSED_COMBINE=1), gemv2 combines (no `combine` pass).
        let names: Vec<&str> = times.iter().map(|(n, _)| n.as_str()).collect();
        let mut want = vec!["route", "moe/input_qdq", "moe/gemv1", "moe/gemv2"];
        if !b.fused_combine() {
            want.push("moe/combine");
        }
        assert_eq!(names, want);
        assert!(times.iter().all(|(_, t)| *t >= 0.0 && t.is_finite()));
        let times_gemv = times.clone();
        let (gemm, times) = b
            .moe_path(&g, &hs, &logits, opts, MoePath::Gemm, true)
            .unwrap();
        let names: Vec<String> = times
            .unwrap_or_default()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "route",
                "moe/lists",
                "moe/input_qdq",
                "moe/gemm1",
                "moe/gemm2",
                "moe/combine"
            ]
        );
        assert_eq!(gemm.routing.topk_ids, plain.routing.topk_ids);
        // The forward as one span (the untimed recording's one compute pass between two
        // timestamps): one entry, the same output, a positive time.
        let (spanned, span) = b
            .moe_timing(&g, &hs, &logits, opts, Timing::Forward)
            .unwrap();
        let span = span.unwrap();
        assert_eq!(spanned.output, plain.output);
        assert_eq!(span.len(), 1);
        assert_eq!(span[0].0, "forward");
        let longest = times_gemv.iter().map(|x| x.1).fold(0.0, f64::max);
        assert!(span[0].1.is_finite() && span[0].1 > 0.0, "{span:?}");
        eprintln!(
            "forward span {} ms; longest GEMV-path pass {longest} ms",
            span[0].1
        );
    } else {
        println!("UNSUPPORTED timestamps on {}", b.adapter());
    }
}

/// Timing::Host: the forward's host phases come back as `upload`, `forward`, `readback` (every
/// adapter: host clocks, no timestamps), each positive and finite, their sum within the wall
/// time measured around the call; the output, ids and weights are the plain forward's, bit for
/// bit, and a plain forward after it (the upload buffer and the forward cache as the phased
/// forward left them) too. Decode (GEMV, lists built by gemv1), a GEMM-sized batch, and a batch
/// large enough to take the parallel upload and readback copies.
#[test]
fn moe_host_phases() {
    let b = gpu!("moe_host_phases");
    let h = 64;
    let layer = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, h, 64, 2))
        .build()
        .unwrap();
    let g = b.prepare(&layer).unwrap();
    let opts = MoeOptions::default();
    // 20000 tokens: 5.1 MB of hidden states and of output (above WRITE_PAR_MIN).
    for (m, seed) in [(1, 11), (3, 12), (300, 13), (20000, 14)] {
        let (hs, logits) = synth_batch(m, h, 8, seed);
        let plain = b.moe_timing(&g, &hs, &logits, opts, Timing::Off).unwrap().0;
        let t0 = Instant::now();
        let (got, phases) = b.moe_timing(&g, &hs, &logits, opts, Timing::Host).unwrap();
        let wall = t0.elapsed().as_secs_f64() * 1e3;
        let phases = phases.expect("Timing::Host reports phases on every adapter");
        let names: Vec<&str> = phases.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, mxmoe::backend::HOST_PHASES, "M = {m}");
        assert!(
            phases.iter().all(|(_, ms)| ms.is_finite() && *ms > 0.0),
            "M = {m}: {phases:?}"
        );
        let sum: f64 = phases.iter().map(|(_, ms)| ms).sum();
        assert!(
            sum <= wall,
            "M = {m}: phases {phases:?} sum {sum} > wall {wall} ms"
        );
        eprintln!("M = {m}: host phases {phases:.3?} (sum {sum:.3}, wall {wall:.3} ms)");
        let again = b.moe_timing(&g, &hs, &logits, opts, Timing::Off).unwrap().0;
        for (what, o) in [("host-phased", &got), ("plain after it", &again)] {
            assert_eq!(
                first_bit_mismatch(&o.output, &plain.output),
                None,
                "M = {m}: {what} output"
            );
            assert_eq!(
                o.routing.topk_ids, plain.routing.topk_ids,
                "M = {m}: {what}"
            );
            assert_eq!(
                first_bit_mismatch(&o.routing.topk_weights, &plain.routing.topk_weights),
                None,
                "M = {m}: {what} weights"
            );
        }
    }
}

/// The output read back in pieces (each copied by a submission of its own and copied out while
/// the device copies the next; by default from 16 MiB on) equals the one-copy readback, bit for
/// bit: pieces that divide the output evenly and not, one piece, and with timestamps (which
/// share the first piece's buffer) and host phases.
#[test]
fn readback_in_pieces_matches_one_copy() {
    let b = fresh_gpu!("readback_in_pieces_matches_one_copy");
    b.set_poison(true);
    let h = 64;
    let layer = LayerSpec::new(spec(Scheme::OCP_MX[0], Activation::Silu, 8, h, 64, 2))
        .build()
        .unwrap();
    let g = b.prepare(&layer).unwrap();
    let opts = MoeOptions::default();
    for (m, seed) in [(1, 21), (300, 22)] {
        let (hs, logits) = synth_batch(m, h, 8, seed);
        b.set_read_pieces(None);
        let one = b.moe_timing(&g, &hs, &logits, opts, Timing::Off).unwrap().0;
        // 300 tokens: 76800 bytes = 300 pieces of 256, 60 of 1280, 42 of 1792 and a short one.
        for pieces in [(256, 256), (1024, 1280), (0, 1792), (1 << 30, 256)] {
            b.set_read_pieces(Some(pieces));
            for (what, timing) in [
                ("plain", Timing::Off),
                ("per-pass timestamps", Timing::Passes),
                ("host phases", Timing::Host),
            ] {
                let o = b.moe_timing(&g, &hs, &logits, opts, timing).unwrap().0;
                let at = format!("M = {m}, pieces {pieces:?}, {what}");
                assert_eq!(first_bit_mismatch(&o.output, &one.output), None, "{at}");
                assert_eq!(o.routing.topk_ids, one.routing.topk_ids, "{at}");
                assert_eq!(
                    first_bit_mismatch(&o.routing.topk_weights, &one.routing.topk_weights),
                    None,
                    "{at}"
                );
            }
        }
    }
    b.set_read_pieces(None);
}

/// `mxmoe bench` on wgpu reports the host phases beside wall and GPU time: every phase's
/// [min, median, max] ordered and positive, the sum of each forward's phases within the wall
/// time measured around it, and the forward's host overhead `forward - gpu` where GPU time is
/// known.
#[test]
fn bench_reports_host_phases() {
    let _ = gpu!("bench_reports_host_phases");
    let b = mxmoe::backend::Backend::open(mxmoe::backend::BackendKind::Wgpu, None).unwrap();
    let mut shape = mxmoe::check::catalog::model_shape("gpt-oss-120b").unwrap();
    (shape.synth.n_experts, shape.synth.hidden, shape.synth.inter) = (8, 64, 64);
    let p = mxmoe::bench::BenchParams {
        tokens: vec![2],
        iters: 2,
        rotate: 2,
        hbm_gbps: 1000.0,
        floor_source: "test".into(),
        check: true,
        gemv_layouts: Vec::new(),
        bf16_activations: false,
    };
    let res = mxmoe::bench::run(&b, &shape, &p, |_| ()).unwrap();
    assert_eq!(res.len(), 1);
    let r = &res[0];
    let hp = r.host_phases.as_ref().expect("wgpu reports host phases");
    for (name, v) in [
        ("upload", hp.upload_ms),
        ("forward", hp.forward_ms),
        ("readback", hp.readback_ms),
    ] {
        assert!(
            v[0] > 0.0 && v[0] <= v[1] && v[1] <= v[2] && v[2].is_finite(),
            "{name}: {v:?}"
        );
    }
    assert!(hp.forwards >= 2);
    let f = hp.free_ms;
    assert!(
        0.0 <= f[0] && f[0] <= f[1] && f[1] <= f[2] && f[2].is_finite(),
        "free {f:?}"
    );
    assert!(hp.sum_ms > 0.0 && hp.sum_ms <= hp.wall_ms, "{hp:?}");
    match r.gpu_ms {
        Some(g) => assert_eq!(hp.forward_host_ms, Some(hp.forward_ms[1] - g)),
        None => assert_eq!(hp.forward_host_ms, None),
    }
    let j = serde_json::to_value(r).unwrap();
    assert!(j["host_phases"]["upload_ms"].is_array(), "{j}");
}

/// Not a correctness test: GPU pass times for a few shapes on both paths (run with
/// `cargo test --release --test wgpu_backend -- --ignored --nocapture timing_report`;
/// `MXMOE_TIMING="128,2880,2880,4,1;128,2880,2880,4,256"` for model shapes).
#[test]
#[ignore]
fn timing_report() {
    let b = gpu!("timing_report");
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::F32,
        taps: false,
        profile: mxmoe::format::ProfileId::Contract,
    };
    // MXMOE_TIMING="E,H,I,k,M[;E,H,I,k,M...]" picks the shapes (e.g. gpt-oss-120b decode:
    // "128,2880,2880,4,1"); MXMOE_TIMING_M=M keeps the default layer with M tokens.
    let shapes: Vec<(usize, usize, usize, usize, usize)> =
        if let Ok(v) = std::env::var("MXMOE_TIMING") {
            v.split(';')
                .map(|t| {
                    let n: Vec<usize> = t.split(',').map(|x| x.trim().parse().unwrap()).collect();
                    (n[0], n[1], n[2], n[3], n[4])
                })
                .collect()
        } else if let Ok(v) = std::env::var("MXMOE_TIMING_M") {
            vec![(32, 1024, 512, 4, v.parse().unwrap())]
        } else {
            vec![
                (32, 1024, 512, 4, 1),
                (32, 1024, 512, 4, 16),
                (32, 1024, 512, 4, 256),
            ]
        };
    for (e, h, i, k, m) in shapes {
        let layer = mxmoe::moe::synth::synth_layer_packed(&spec(
            Scheme::OCP_MX[0],
            Activation::Silu,
            e,
            h,
            i,
            k,
        ))
        .unwrap();
        let g = b.prepare(&layer).unwrap();
        let (hs, logits) = synth_batch(m, h, e, 1);
        for path in [MoePath::Gemm, MoePath::Gemv] {
            let _ = b.moe_path(&g, &hs, &logits, opts, path, true).unwrap();
            let t = Instant::now();
            let (_, times) = b.moe_path(&g, &hs, &logits, opts, path, true).unwrap();
            let times = times.unwrap_or_default();
            let wall = t.elapsed().as_secs_f64() * 1e3;
            let gpu: f64 = times.iter().map(|(_, t)| t).sum();
            let flops = 2.0 * (m * k) as f64 * (3 * h * i) as f64;
            eprintln!(
                "E={e} H={h} I={i} k={k} M={m} {path:?}: wall {wall:.2} ms, GPU {gpu:.2} ms \
                 ({:.2} GFLOP/s, weights {:.1} MiB) {times:.3?}",
                flops / gpu.max(1e-9) / 1e6,
                g.bytes as f64 / (1 << 20) as f64
            );
        }
    }
}

/// Streaming-read bandwidth of weight-like and pooled buffers (GB/s per pass), e.g. on the
/// H200: `MXMOE_PROBE_MIB=1024 <test binary> --ignored --nocapture bandwidth_probe`.
#[test]
#[ignore]
fn bandwidth_probe() {
    let b = gpu!("bandwidth_probe");
    let mib: u64 = std::env::var("MXMOE_PROBE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let r = b.bandwidth_probe(mib << 20, 5).unwrap();
    eprintln!("bandwidth probe, {mib} MiB: {r:.1?}");
}

/// `mxmoe bench`'s floor: the adapter's copy bandwidth, measured by a compute pass that really
/// copies (the kernel's output is checked against its input inside `copy_bandwidth`), timed,
/// and plausible: above 0.1 GB/s and below 100 TB/s.
#[test]
fn copy_bandwidth_is_measured_on_the_adapter() {
    let b = gpu!("copy_bandwidth_is_measured_on_the_adapter");
    match b.copy_bandwidth(8 << 20, 1, 3).unwrap() {
        Some((gbps, copied)) => {
            eprintln!("copy bandwidth: {gbps:.1?} GB/s over {copied} bytes");
            assert_eq!(gbps.len(), 3, "one sample per timed pass");
            for g in gbps {
                assert!(g > 0.1 && g < 1e5, "{g} GB/s");
            }
            assert!(copied >= 8 << 20, "{copied}");
        }
        None => eprintln!("SKIPPED: the adapter has no timestamp queries"),
    }
}

/// `mxmoe info`'s adapter list: non-empty when a backend opened, and it names the chosen one.
#[test]
fn adapters_are_listed() {
    let b = gpu!("adapters_are_listed");
    let list = WgpuBackend::enumerate_adapters();
    for a in &list {
        eprintln!("adapter: {a}");
    }
    let chosen = &b.info().adapter;
    assert!(
        list.iter()
            .any(|a| a.name == chosen.name && a.backend == chosen.backend),
        "{} not in the adapter list",
        chosen.name
    );
    assert!(chosen.compute);
    assert!(chosen.max_storage_buffer_binding_size >= 128 << 20);
    eprintln!("enabled features: {:?}", b.info().enabled_features);
}

/// 2^n as an f32 (exact; n within the normal range).
fn pow2(n: i32) -> f32 {
    assert!((-126..=127).contains(&n));
    f32::from_bits(((127 + n) as u32) << 23)
}

/// The contract of kernel k64p's pre-pass (shaders/moe_coop_prepass.wgsl header), computed on
/// the CPU with the `half` crate's f16 conversion (round to nearest even): the row exponent
/// e = max(floor(log2(largest finite |x|)), -112); v = x * 2^(14 - e); hi = f16(v with its 13
/// low significand bits cleared); lo = f16(v - hi); non-finite x: hi = x (NaN: 0x7E00 with the
/// sign), lo = 0.
fn prepass_row_cpu(row: &[f32]) -> (i32, Vec<u16>, Vec<u16>) {
    let m = row
        .iter()
        .map(|x| x.to_bits() & 0x7FFF_FFFF)
        .filter(|&a| a < 0x7F80_0000)
        .max()
        .unwrap_or(0);
    let e = ((m >> 23) as i32 - 127).max(-112);
    let mut hi = Vec::new();
    let mut lo = Vec::new();
    for &x in row {
        if x.is_nan() {
            hi.push(0x7E00 | ((x.to_bits() >> 16) as u16 & 0x8000));
            lo.push(0);
        } else if x.is_infinite() {
            hi.push(half::f16::from_f32(x).to_bits());
            lo.push(0);
        } else {
            let v = x * pow2(14 - e);
            let h = half::f16::from_f32(f32::from_bits(v.to_bits() & 0xFFFF_E000));
            hi.push(h.to_bits());
            lo.push(half::f16::from_f32(v - h.to_f32()).to_bits());
        }
    }
    (e, hi, lo)
}

/// Rows that reach the edges of the pre-pass: hand-picked values (an RNE tie in lo, values
/// 2^-17 and far below the row's largest, f16-subnormal v, NaN, +-Inf, zeros, a row of NaN,
/// a row whose largest is below 2^-112), then pseudo-random magnitudes over 40 binades.
fn prepass_rows(n: usize, kk: usize) -> Vec<f32> {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut rnd = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut x = vec![0f32; n * kk];
    for r in 0..n {
        let row = &mut x[r * kk..(r + 1) * kk];
        for v in row.iter_mut() {
            let b = rnd();
            let mant = 1.0 + (b & 0xFFFFF) as f32 / 1048576.0;
            let e = (b >> 20) % 40;
            let sign = if (b >> 30) & 1 == 1 { -1.0 } else { 1.0 };
            *v = sign * mant * pow2(5 - e as i32);
        }
        match r % 6 {
            0 => {
                row.iter_mut().for_each(|v| *v *= pow2(-2)); // below 16: 40 is the largest
                row[0] = 1.0 / 3.0;
                row[1] = f32::NAN;
                row[2] = f32::NEG_INFINITY;
                row[3] = f32::INFINITY;
                row[4] = -0.0;
                row[5] = 40.0; // the row's largest: e = 5
                row[6] = 40.0 * pow2(-17);
                row[7] = 40.0 * pow2(-17) * 1.337;
                row[8] = 40.0 * pow2(-31) * 1.5; // v in f16 subnormals
                row[9] = 40.0 * pow2(-45); // below every f16 of v: hi = lo = 0
            }
            1 => row.iter_mut().for_each(|v| *v = 0.0),
            // Largest below 2^-112 (and no f32 subnormal): e = -112.
            2 => row
                .iter_mut()
                .for_each(|v| *v = v.signum() * (1.0 + v.abs().fract() / 2.0) * pow2(-118)),
            3 => row.iter_mut().for_each(|v| *v = f32::NAN),
            _ => {}
        }
    }
    x
}

/// Kernel k64p's activation pre-passes (plain compute: they run here on every adapter,
/// lavapipe included, although the GEMM that reads them needs cooperative matrices): stage 1
/// scatters each token row to its pairs' GEMM rows (row_of_pair, -1 skipped), stage 2 converts
/// rows in place; every row's exponent and f16 hi / lo bits equal the contract computed on the
/// CPU; hand-written bits for a few values; hi + lo reconstructs every finite x down to 2^-17
/// of its row's largest exactly; schemes with MX activations write no lo.
#[test]
fn coop_prepass_matches_cpu_split() {
    let b = gpu!("coop_prepass_matches_cpu_split");
    let (m, kk, top_k) = (7usize, 320usize, 3usize);
    // Stage 1: token rows -> pair rows; pairs of token 4 belong to another rank (-1).
    let x = prepass_rows(m, kk);
    let rows = m * top_k;
    let mut row_of_pair = vec![-1i32; rows];
    let mut next = 0i32;
    for p in (0..rows).rev() {
        if p / top_k != 4 {
            row_of_pair[p] = next;
            next += 1;
        }
    }
    for weight_only in [true, false] {
        let got = b
            .coop_prepass(1, &x, m, kk, top_k, &row_of_pair, weight_only)
            .expect("coopp_prep1");
        let mut written = vec![false; rows];
        for (p, &r) in row_of_pair.iter().enumerate() {
            if r < 0 {
                continue;
            }
            let r = r as usize;
            written[r] = true;
            let t = p / top_k;
            let (e, hi, lo) = prepass_row_cpu(&x[t * kk..(t + 1) * kk]);
            assert_eq!(got.exp[r], e, "stage 1 token {t} row {r}: exponent");
            for k in 0..kk {
                assert_eq!(
                    got.hi[r * kk + k],
                    hi[k],
                    "stage 1 token {t} row {r} k {k}: hi of {:e} (e {e})",
                    x[t * kk + k]
                );
                let want_lo = if weight_only { lo[k] } else { 0 };
                assert_eq!(
                    got.lo[r * kk + k],
                    want_lo,
                    "stage 1 token {t} row {r} k {k}: lo"
                );
            }
        }
        // Rows no pair names are not written (they start as zeros).
        for r in (0..rows).filter(|&r| !written[r]) {
            assert!(
                got.hi[r * kk..(r + 1) * kk].iter().all(|&h| h == 0),
                "row {r} written"
            );
        }
    }
    // Stage 2: rows in place (weight-only).
    let x2 = prepass_rows(rows, kk);
    let got = b
        .coop_prepass(2, &x2, m, kk, top_k, &[], true)
        .expect("coopp_prep2");
    for r in 0..rows {
        let row = &x2[r * kk..(r + 1) * kk];
        let (e, hi, lo) = prepass_row_cpu(row);
        assert_eq!(got.exp[r], e, "stage 2 row {r}: exponent");
        assert_eq!(
            &got.hi[r * kk..(r + 1) * kk],
            &hi[..],
            "stage 2 row {r}: hi"
        );
        assert_eq!(
            &got.lo[r * kk..(r + 1) * kk],
            &lo[..],
            "stage 2 row {r}: lo"
        );
        // The contract, in units of v = x * 2^(14 - e) (f64 holds these sums exactly):
        // |hi + lo - v| <= max(2^-21 |v|, 2^-25); exact for x with at most 22 significant bits
        // (checked on x rounded to bf16 below) down to 2^-17 of the row's largest.
        for (k, &x) in row.iter().enumerate() {
            if x.is_finite() {
                let h = half::f16::from_bits(got.hi[r * kk + k]).to_f64();
                let l = half::f16::from_bits(got.lo[r * kk + k]).to_f64();
                let v = x as f64 * 2f64.powi(14 - e);
                let err = (h + l - v).abs();
                assert!(
                    err <= (v.abs() * 2f64.powi(-21)).max(2f64.powi(-25)),
                    "stage 2 row {r} k {k}: hi + lo of {x:e} off by {err:e} (v {v:e})"
                );
            }
        }
    }
    // Hand-written bits (row 0 of stage 2: largest finite 40 -> e = 5).
    let r0 = &got;
    assert_eq!(r0.exp[0], 5);
    // 1/3 (0x3EAAAAAB) * 2^9 = 11184811 / 65536 = 170.66667175...: hi = 170.625 (0x5955),
    // lo = 2731 / 65536 = 1.33349609375 * 2^-5: an f16 mantissa of 341.5 ulps, a tie, to
    // even 342: 0x2956.
    assert_eq!((r0.hi[0], r0.lo[0]), (0x5955, 0x2956), "1/3");
    assert_eq!((r0.hi[1], r0.lo[1]), (0x7E00, 0), "NaN");
    assert_eq!((r0.hi[2], r0.lo[2]), (0xFC00, 0), "-Inf");
    assert_eq!((r0.hi[3], r0.lo[3]), (0x7C00, 0), "+Inf");
    assert_eq!((r0.hi[4], r0.lo[4]), (0x8000, 0), "-0");
    // 40 * 2^9 = 20480 = 1.25 * 2^14: 0x7500.
    assert_eq!((r0.hi[5], r0.lo[5]), (0x7500, 0), "40");
    // 40 * 2^-17 * 2^9 = 1.25 * 2^-3: 0x3100.
    assert_eq!((r0.hi[6], r0.lo[6]), (0x3100, 0), "40 * 2^-17");
    // 40 * 2^-31 * 1.5 * 2^9 = 1.875 * 2^-17: an f16 subnormal, 240 * 2^-24: 0x00F0.
    assert_eq!((r0.hi[8], r0.lo[8]), (0x00F0, 0), "f16 subnormal");
    assert_eq!((r0.hi[9], r0.lo[9]), (0, 0), "below f16");
    assert_eq!(r0.exp[1], -112, "zero row");
    assert_eq!(r0.exp[3], -112, "NaN row");
    assert_eq!(r0.exp[2], -112, "row whose largest is below 2^-112");
    // Values of at most 22 significant bits (here: bf16) come back exactly down to 2^-17 of
    // the row's largest.
    let xb: Vec<f32> = x2
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_f32())
        .collect();
    let gb = b
        .coop_prepass(2, &xb, m, kk, top_k, &[], true)
        .expect("coopp_prep2 bf16");
    for r in 0..rows {
        let row = &xb[r * kk..(r + 1) * kk];
        let big = row
            .iter()
            .filter(|v| v.is_finite())
            .fold(0f32, |a, v| a.max(v.abs()));
        let e = gb.exp[r];
        for (k, &x) in row.iter().enumerate() {
            if x.is_finite() && x.abs() >= big * pow2(-17) {
                let h = half::f16::from_bits(gb.hi[r * kk + k]).to_f64();
                let l = half::f16::from_bits(gb.lo[r * kk + k]).to_f64();
                assert_eq!(
                    (h + l) * 2f64.powi(e - 14),
                    x as f64,
                    "bf16 row {r} k {k}: {x:e}"
                );
            }
        }
    }
    // Bad input is refused by name, never run.
    let e = b.coop_prepass(3, &x2, m, kk, top_k, &[], true).unwrap_err();
    assert!(e.to_string().contains("stage 3"), "{e}");
    let e = b
        .coop_prepass(2, &x2[1..], m, kk, top_k, &[], true)
        .unwrap_err();
    assert!(e.to_string().contains("values for"), "{e}");
}

/// `MXMOE_COOP_KERNEL`'s values (no adapter needed): every kernel by its name, `auto` and
/// empty for the default, anything else refused with the variable, the value and the names;
/// each kernel's entry points are its own.
#[test]
fn coop_kernel_names_parse() {
    assert_eq!(CoopKernel::parse("k32"), Ok(Some(CoopKernel::K32)));
    assert_eq!(CoopKernel::parse("k64"), Ok(Some(CoopKernel::K64)));
    assert_eq!(CoopKernel::parse("k64p"), Ok(Some(CoopKernel::K64p)));
    assert_eq!(CoopKernel::parse(" k64p "), Ok(Some(CoopKernel::K64p)));
    assert_eq!(CoopKernel::parse("k64pw"), Ok(Some(CoopKernel::K64pw)));
    assert_eq!(CoopKernel::parse("auto"), Ok(None));
    assert_eq!(CoopKernel::parse(""), Ok(None));
    for bad in ["k64P", "k64pp", "k64w", "K32", "k128", "64"] {
        let e = CoopKernel::parse(bad).unwrap_err();
        assert_eq!(
            e,
            format!("MXMOE_COOP_KERNEL={bad}: expected k32, k64, k64p, k64pw or auto"),
            "{bad}"
        );
    }
    assert_eq!(
        CoopKernel::K64p.entries(),
        ("coop64p_gemm1", "coop64p_gemm2")
    );
    assert_eq!(
        CoopKernel::K64pw.entries(),
        ("coop64pw_gemm1", "coop64pw_gemm2")
    );
    assert!(CoopKernel::K64p.prepass() && CoopKernel::K64pw.prepass());
    assert!(!CoopKernel::K64.prepass() && !CoopKernel::K32.prepass());
    assert_eq!(CoopKernel::K64.entries(), ("coop64_gemm1", "coop64_gemm2"));
    assert_eq!(CoopKernel::K32.entries(), ("coop_gemm1", "coop_gemm2"));
    for (n, k) in CoopKernel::NAMES {
        assert_eq!(k.name(), n);
    }
}

/// The pre-pass kernels' forward plumbing on every adapter: with `set_gemm_pre_ref` the tiled
/// GEMM reads the rows the pre-passes converted (`coopp_prep1` scatters the token rows to the
/// pairs' GEMM rows, `coopp_prep2` converts the intermediate, `gemm1_pre_ref` / `gemm2_pre_ref`
/// apply each row's exponent) in a real forward: the pass sequence is the pre-pass kernels'
/// (timestamps, where offered), and every quick MoE case of the catalog (all schemes, both
/// activations, biases, expert maps, the router weight on the input, bf16 intermediates,
/// partial tiles; poisoned buffers) must satisfy its judge through it, as must a layer whose
/// weights are split across buffers. Own backend instance (the hook is per context).
#[test]
fn gemm_pre_ref_on_catalog_cases() {
    let b = fresh_gpu!("gemm_pre_ref_on_catalog_cases");
    b.set_poison(true);
    if b.coop_gemm() {
        b.set_coop_gemm(false).unwrap(); // the hook replaces the tiled GEMM only
    }
    b.set_gemm_pre_ref(true);
    let layer = LayerSpec::new(SynthSpec::new(Scheme::OCP_MX[0], 8, 64, 64, 2))
        .build()
        .unwrap();
    let (hs, logits) = synth_batch(9, 64, 8, 3);
    let g = b.prepare(&layer).unwrap();
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        intermediate: Intermediate::F32,
        taps: false,
        profile: mxmoe::format::ProfileId::Contract,
    };
    let (_, times) = b
        .moe_path(&g, &hs, &logits, opts, MoePath::Gemm, true)
        .unwrap();
    if b.has_timestamps() {
        let names: Vec<String> = times
            .unwrap_or_default()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "route",
                "moe/lists",
                "moe/input_qdq",
                "moe/prep1",
                "moe/gemm1_pre_ref",
                "moe/prep2",
                "moe/gemm2_pre_ref",
                "moe/combine"
            ]
        );
    } else {
        println!(
            "UNSUPPORTED timestamps on {} (pass names not checked)",
            b.adapter()
        );
    }
    let mut mat = Materializer::default();
    let cases: Vec<Case> = check::cases(Suite::Quick)
        .into_iter()
        .filter(Case::is_moe)
        .collect();
    assert!(cases.len() > 50);
    for c in &cases {
        check_on(&b, &mut mat, c, &[MoePath::Gemm]);
    }
    // Weights split across buffers (the GEMMs run once per chunk over the same converted
    // rows) and batches across submits (the bindings hold 18 tokens' rows).
    let l = LayerSpec::new(SynthSpec::new(Scheme::OCP_MX[3], 8, 64, 64, 4));
    let layer = l.build().unwrap();
    let per_expert = (layer.weights.w13.data.len() / 8).max(layer.weights.w2.data.len() / 8) as u64;
    b.set_max_chunk_bytes(per_expert * 3);
    assert_eq!(
        b.prepare(&layer).unwrap().chunks(),
        3,
        "8 experts, 3 per chunk"
    );
    check_on(
        &b,
        &mut mat,
        &moe_case(Tier::Quick, &l, 17, 61),
        &[MoePath::Gemm],
    );
    check_on(
        &b,
        &mut mat,
        &moe_case(Tier::Quick, &l, 40, 62),
        &[MoePath::Gemm],
    );
    b.set_max_chunk_bytes(0);
}
