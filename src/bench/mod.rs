//! Benchmark harness: bytes/FLOPs accounting, the weight-read floor, JSON results.
//!
//! Counting first (PERF.md): a MoE layer at M tokens must read the packed weights + scales of
//! every expert its tokens touch at least once; at `hbm_gbps` that is the time floor. Each
//! result reports wall time per layer (submission and readback included, as users pay it), GPU
//! time from timestamps when the backend has them, achieved GB/s and TFLOP/s, and the ratio to
//! the floor. Token batches rotate (several distinct batches) so that repeated runs do not just
//! re-read weights from L2.
//!
//! The layer, the token batches and the flop and byte counts come from the case catalog
//! (`check::catalog::bench_cases` of a named model shape), so a benchmark point and a
//! conformance case of the same id are the same computation.

use crate::backend::{Backend, BackendError};
use crate::check::catalog::{self, Kind, LayerSpec};
use crate::check::rel_l2;
use crate::moe::{self, Accumulate, MoeLayer, MoeOptions};
use serde::Serialize;
use std::time::Instant;

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    /// The catalog case measured (e.g. `moe/w_mxfp4/swigluoai/gpt-oss-120b/m4`).
    pub case: String,
    pub backend: String,
    pub adapter: String,
    pub scheme: String,
    pub experts: usize,
    pub hidden: usize,
    pub inter: usize,
    pub top_k: usize,
    pub tokens: usize,
    /// Distinct local experts touched, averaged over the rotated batches.
    pub active_experts: f64,
    /// Packed weight + scale bytes of the active experts (the floor's bytes).
    pub weight_bytes: f64,
    pub flops: f64,
    /// Median wall time per layer (ms).
    pub wall_ms: f64,
    /// Median GPU time per layer from timestamps (ms), if available.
    pub gpu_ms: Option<f64>,
    /// Time floor: weight_bytes / hbm_gbps (ms).
    pub floor_ms: f64,
    /// Achieved weight-read bandwidth (GB/s) over GPU time (else wall time).
    pub gbps: f64,
    pub tflops: f64,
    /// (GPU or wall) time / floor time: 1.0 is the memory roofline.
    pub ratio_to_floor: f64,
    /// Relative L2 against the CPU f32 reference for the first batch (None when not checked).
    pub rel_l2_vs_cpu: Option<f64>,
}

/// Bytes of one local expert's packed weights + scales.
pub fn expert_bytes(layer: &MoeLayer) -> f64 {
    let e = layer.local_experts().max(1) as f64;
    layer.weight_bytes() as f64 / e
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// Parameters of one benchmark run.
pub struct BenchParams {
    pub tokens: Vec<usize>,
    pub iters: usize,
    pub rotate: usize,
    pub hbm_gbps: f64,
    pub check: bool,
}

/// Run the benchmark of the layer `shape` (a catalog model shape, possibly with overridden
/// sizes) on backend `b` at each token count of `p`: the catalog's bench cases of that layer.
pub fn run(
    b: &Backend,
    shape: &LayerSpec,
    p: &BenchParams,
    mut progress: impl FnMut(&str),
) -> Result<Vec<BenchResult>, BackendError> {
    let opts = MoeOptions {
        accumulate: Accumulate::F32,
        ..Default::default()
    };
    let (h, i, e) = (shape.synth.hidden, shape.synth.inter, shape.n_experts());
    let k = shape.synth.router.top_k;
    progress(&format!(
        "generating {} experts, H {h}, I {i}, top-{k} ...",
        shape.synth.n_experts
    ));
    let layer = &shape.build()?;
    let per_expert = expert_bytes(layer);
    // Prepare once (the GPU uploads the weights; the CPU borrows them).
    progress(&format!(
        "preparing {:.1} MiB of weights on {}",
        layer.weight_bytes() as f64 / 1048576.0,
        b.name()
    ));
    let prepared = b.prepare(layer)?;
    let mut out = Vec::new();
    for case in catalog::bench_cases(shape, &p.tokens, p.rotate) {
        let Kind::Moe(mc) = &case.kind else {
            continue;
        };
        let m = mc.m;
        let batches: Vec<(Vec<f32>, Vec<f32>)> = (0..mc.seeds.len()).map(|r| mc.batch(r)).collect();
        // The floor's bytes (the distinct local experts per batch) and the flops.
        let logits: Vec<&[f32]> = batches.iter().map(|(_, lg)| lg.as_slice()).collect();
        let cost = catalog::moe_cost(layer, m, &logits)?;
        let (bytes, flops) = (cost.weight_bytes, cost.flops);
        let active = bytes / per_expert;
        let run1 = |bi: usize| -> Result<moe::MoeOutput, BackendError> {
            let (hs, lg) = &batches[bi % batches.len()];
            b.moe(&prepared, hs, lg, opts)
        };
        progress(&format!("M = {m}: warm-up"));
        let first = run1(0)?;
        let rel = if p.check {
            let (hs, lg) = &batches[0];
            let want = moe::forward(layer, hs, lg, opts)?;
            Some(rel_l2(&first.output, &want.output).0)
        } else {
            None
        };
        run1(1)?;
        let mut walls = Vec::new();
        for it in 0..p.iters {
            let t0 = Instant::now();
            run1(it)?;
            walls.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let mut gpu = Vec::new();
        for it in 0..p.iters {
            let (hs, lg) = &batches[it % batches.len()];
            match b.moe_timed(&prepared, hs, lg, opts, true)? {
                (_, Some(passes)) => gpu.push(passes.iter().map(|(_, ms)| ms).sum::<f64>()),
                (_, None) => break,
            }
        }
        let wall_ms = median(walls);
        let gpu_ms = (!gpu.is_empty()).then(|| median(gpu));
        let t = gpu_ms.unwrap_or(wall_ms);
        let floor_ms = bytes / (p.hbm_gbps * 1e9) * 1e3;
        let r = BenchResult {
            case: case.id.clone(),
            backend: b.name().into(),
            adapter: b.adapter(),
            scheme: layer.config.scheme.name(),
            experts: e,
            hidden: h,
            inter: i,
            top_k: k,
            tokens: m,
            active_experts: active,
            weight_bytes: bytes,
            flops,
            wall_ms,
            gpu_ms,
            floor_ms,
            gbps: bytes / (t * 1e-3) / 1e9,
            tflops: flops / (t * 1e-3) / 1e12,
            ratio_to_floor: t / floor_ms,
            rel_l2_vs_cpu: rel,
        };
        progress(&format!(
            "M = {m}: wall {:.3} ms, gpu {}, floor {:.3} ms, {:.0} GB/s, {:.2} TFLOP/s, {:.1}x floor{}",
            r.wall_ms,
            r.gpu_ms.map_or("-".into(), |g| format!("{g:.3} ms")),
            r.floor_ms,
            r.gbps,
            r.tflops,
            r.ratio_to_floor,
            r.rel_l2_vs_cpu.map_or(String::new(), |x| format!(", rel-L2 vs cpu {x:.2e}"))
        ));
        out.push(r);
    }
    Ok(out)
}
