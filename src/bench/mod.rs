//! Benchmark harness: bytes/FLOPs accounting, the weight-read floor, JSON results.
//!
//! Counting first: a MoE layer at M tokens must read the packed weights + scales
//! of every expert its tokens touch at least once; at `hbm_gbps` (the device's measured copy
//! bandwidth, or `--hbm-gbps`) that is the time floor.
//!
//! Measuring right: a GPU drops its clock within half a second of idling (the H200 from 1980 to
//! 345 MHz), so every token count first **warms up** with back-to-back forwards for at least
//! [`WARMUP_MIN_S`] and until the medians of two successive windows agree within
//! [`WARMUP_AGREE`] (at most [`WARMUP_MAX_S`]); then it times at least `iters` forwards and
//! [`TIMED_MIN_S`] back to back, three times: once for wall time (submit + GPU + readback, as
//! users pay it), once for GPU time (the forward as one span of timestamps / events, gaps
//! between kernels included: [`Timing::Forward`]) and once pass by pass (the breakdown,
//! [`Timing::Passes`]; its sum, reported on its own, leaves the gaps out). Wall and GPU time are
//! reported as min/median/max. A fourth loop times the host phases ([`Timing::Host`]: the
//! activations' upload, the forward with its inputs on the device, the readback, each ended by
//! a wait: [`HostPhases`]), so that the transfers are reported on their own rows and the
//! forward's own host overhead is `forward - gpu`. The weights' upload (`prepare`) is timed
//! once, on its own; the host time outside the GPU span is `wall - gpu`. Token batches rotate (several distinct batches) so that repeated runs
//! do not just re-read activations from L2. Every point is checked against the CPU reference
//! (for M > [`CHECK_TOKENS`], on an evenly spaced sample of that many tokens: routing is per
//! token, so the CPU's result on the sample is exactly its result on those rows), in the
//! forward before the warm-up and in [`CHECK_REPEATS`] more after the timed loops; the worst
//! counts (a race between workgroups can pass one forward and fail another).
//!
//! The layer, the token batches and the flop and byte counts come from the case catalog
//! (`check::catalog::bench_cases` of a named model shape), so a benchmark point and a
//! conformance case of the same id are the same computation.

use crate::backend::{Backend, BackendError, Timing, HOST_PHASES};
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
    /// Kernel choices of the backend ([`Backend::notes`]).
    pub notes: Vec<String>,
    pub scheme: String,
    /// "f32" (the contract's f32 hidden states and intermediates) or "bf16" (`--bf16-activations`:
    /// bf16-valued hidden states, bf16 intermediates).
    pub activations: String,
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
    /// Median wall time per forward (ms): submit + GPU + readback.
    pub wall_ms: f64,
    /// [min, median, max] wall time per forward (ms).
    pub wall_ms_range: [f64; 3],
    /// Median GPU time per forward (ms): the forward as one span of timestamps / events, gaps
    /// between kernels included ([`Timing::Forward`]), if available.
    pub gpu_ms: Option<f64>,
    /// [min, median, max] GPU time per forward (ms), if available.
    pub gpu_ms_range: Option<[f64; 3]>,
    /// Median GPU time of each pass (ms), in submission order (a pass run once per weight
    /// chunk appears once per chunk), from forwards timed pass by pass (their own phase).
    pub passes: Vec<(String, f64)>,
    /// Median of the per-pass forwards' sums (ms): `gpu_ms` without the gaps between passes,
    /// plus what each pass's own timestamps cost.
    pub passes_sum_ms: Option<f64>,
    /// Median host time per forward outside the GPU passes (wall - gpu, ms).
    pub host_ms: Option<f64>,
    /// Where that host time goes: the forward's phases timed on their own ([`Timing::Host`]),
    /// if the backend reports them (wgpu, HIP; not the CPU).
    pub host_phases: Option<HostPhases>,
    /// Forwards timed (each of the wall and the GPU phase).
    pub timed_forwards: usize,
    /// How the point was warmed up, in words.
    pub warmup: String,
    /// One `prepare` (weight upload) of the whole layer (ms) and its bytes.
    pub prepare_ms: f64,
    pub prepare_bytes: u64,
    /// Time floor: weight_bytes / floor_gbps (ms).
    pub floor_ms: f64,
    /// The memory bandwidth the floor divides by (GB/s): this device's copy bandwidth
    /// measured by `mxmoe bench`, or `--hbm-gbps`.
    pub floor_gbps: f64,
    /// Where `floor_gbps` comes from, in words (how it was measured, or `from --hbm-gbps`).
    pub floor_source: String,
    /// Achieved weight-read bandwidth (GB/s) over GPU time (else wall time).
    pub gbps: f64,
    pub tflops: f64,
    /// (GPU or wall) time / floor time: 1.0 is the memory roofline.
    pub ratio_to_floor: f64,
    /// Relative L2 against the CPU f32 reference for the first batch, the worst of the checked
    /// forwards (None when not checked).
    pub rel_l2_vs_cpu: Option<f64>,
    /// Tokens the check compared (all of them, or an evenly spaced sample).
    pub checked_tokens: usize,
    /// Forwards of the first batch compared with the CPU reference: the one before the warm-up
    /// and [`CHECK_REPEATS`] after the timed loops (a race between workgroups can pass one
    /// forward and fail the next; 0 when not checked).
    pub checked_forwards: usize,
    /// Whether the routing ids of the checked tokens equal the CPU's in every checked forward.
    pub ids_match: Option<bool>,
}

/// The host phases of a forward ([`Timing::Host`], their own timed loop of back-to-back
/// forwards): [min, median, max] ms of each. Each phase ends with a wait for the device, so
/// none hides in another; those waits make `sum_ms` a little larger than the plain forward's
/// `wall_ms` (one device round trip each, ~30-45 us on the H200).
#[derive(Clone, Debug, Serialize)]
pub struct HostPhases {
    /// The activations (hidden states, router logits) written to the device, the copy done.
    pub upload_ms: [f64; 3],
    /// The forward with its inputs on the device: host setup (validation, pipelines, buffers,
    /// encoding), submit / launch, GPU, the wait; the output still on the device.
    pub forward_ms: [f64; 3],
    /// The output, ids and weights copied to host-visible memory, the wait, and the copy into
    /// the returned vectors.
    pub readback_ms: [f64; 3],
    /// Median of upload + forward + readback per forward (ms).
    pub sum_ms: f64,
    /// Median wall time of these forwards measured around the call (ms): at least `sum_ms`.
    pub wall_ms: f64,
    /// [min, median, max] ms of dropping the returned output (its `free`: tens of MB at 2048
    /// tokens; glibc unmaps blocks over 32 MiB). Outside `wall_ms` here; inside the plain
    /// forward's `wall_ms` of [`BenchResult`], whose loop drops each output as it goes.
    pub free_ms: [f64; 3],
    /// The forward's own host overhead: median `forward_ms` - `gpu_ms` (ms), where GPU time is
    /// known.
    pub forward_host_ms: Option<f64>,
    /// Forwards timed in this mode.
    pub forwards: usize,
}

/// Forwards of the check batch run again after the timed loops and compared with the same CPU
/// reference. On the H200 a wgpu combine that read other workgroups' stores without a
/// device-scope fence was wrong in 1 of 6 forwards (docs/h200-2026-12-01-session4); one checked
/// forward per row had passed it once.
pub const CHECK_REPEATS: usize = 4;

/// Bytes of one local expert's packed weights + scales.
pub fn expert_bytes(layer: &MoeLayer) -> f64 {
    let e = layer.local_experts().max(1) as f64;
    layer.weight_bytes() as f64 / e
}

/// Warm-up: at least this long back to back...
pub const WARMUP_MIN_S: f64 = 1.0;
/// ...until two successive windows' medians agree this closely...
pub const WARMUP_AGREE: f64 = 0.03;
/// ...but never longer than this.
pub const WARMUP_MAX_S: f64 = 10.0;
/// Each timed phase runs at least this long.
pub const TIMED_MIN_S: f64 = 0.5;
/// Larger batches are checked on an evenly spaced sample of this many tokens.
pub const CHECK_TOKENS: usize = 64;

fn median(v: &[f64]) -> f64 {
    min_med_max(v)[1]
}

/// [min, median, max] of the samples (NaN when empty).
fn min_med_max(v: &[f64]) -> [f64; 3] {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => [f64::NAN; 3],
        n => [v[0], v[n / 2], v[n - 1]],
    }
}

/// The memory bandwidth the floor divides by, measured on `b`'s device as a copy (GB/s, read +
/// write: twice the bytes copied over the time; the median of the timed repeats), with how it
/// was measured in words; None where it cannot be (wgpu without timestamp queries). The CPU and
/// CPU adapters (lavapipe) copy 64-128 MiB a few times, GPUs 256 MiB (beyond any L2) after a
/// warm-up. Each backend checks its copy's output.
pub fn floor_bandwidth(b: &Backend) -> Result<Option<(f64, String)>, BackendError> {
    const MIB: usize = 1 << 20;
    let (samples, words) = match b {
        Backend::Cpu(c) => {
            let bytes = 128 * MIB;
            let what = format!(
                "measured on this machine: a host memory copy on {} threads",
                rayon::current_num_threads()
            );
            (Some((c.copy_bandwidth(bytes, 1, 3), bytes as u64)), what)
        }
        Backend::Wgpu(w) => {
            let (bytes, warm, reps) = if w.is_cpu_adapter() {
                (64 * MIB, 1, 3)
            } else {
                (256 * MIB, 5, 9)
            };
            let what = "measured on this adapter: a compute-pass copy (16-byte loads and stores)";
            (w.copy_bandwidth(bytes as u64, warm, reps)?, what.into())
        }
        Backend::Hip(h) => {
            let bytes = 256 * MIB;
            let what = "measured on this device: a device-to-device copy";
            let s = h.copy_bandwidth(bytes, 5, 9)?;
            (s.map(|s| (s, bytes as u64)), what.into())
        }
    };
    Ok(samples.map(|(s, bytes)| {
        let words = format!(
            "{words}, read + write, median of {} over {} MiB",
            s.len(),
            bytes as f64 / MIB as f64
        );
        (median(&s), words)
    }))
}

/// Back-to-back forwards until the clock is up and the time steady: windows of `window` runs,
/// at least [`WARMUP_MIN_S`], until two successive window medians agree within
/// [`WARMUP_AGREE`] or [`WARMUP_MAX_S`] passed. Returns a description.
fn warm_up(
    mut run: impl FnMut(usize) -> Result<(), BackendError>,
    window: usize,
) -> Result<String, BackendError> {
    let t0 = Instant::now();
    let mut prev = f64::NAN;
    let mut n = 0;
    loop {
        let mut w = Vec::with_capacity(window);
        for _ in 0..window {
            let t = Instant::now();
            run(n)?;
            n += 1;
            w.push(t.elapsed().as_secs_f64());
        }
        let med = median(&w);
        let el = t0.elapsed().as_secs_f64();
        let agree = (med - prev).abs() <= WARMUP_AGREE * prev;
        if el >= WARMUP_MAX_S || (el >= WARMUP_MIN_S && agree) {
            return Ok(format!(
                "{n} forwards back to back in {el:.2} s ({}; last window median {:.3} ms)",
                if agree {
                    format!("window medians within {:.0}%", WARMUP_AGREE * 100.0)
                } else {
                    "stopped at the time limit, not yet steady".into()
                },
                med * 1e3
            ));
        }
        prev = med;
    }
}

/// Evenly spaced token indices to check (all when `m` is small).
fn check_sample(m: usize) -> Vec<usize> {
    if m <= CHECK_TOKENS {
        (0..m).collect()
    } else {
        (0..CHECK_TOKENS).map(|j| j * m / CHECK_TOKENS).collect()
    }
}

/// The rows `toks` of a row-major `[M, w]` buffer.
fn rows(v: &[f32], w: usize, toks: &[usize]) -> Vec<f32> {
    toks.iter()
        .flat_map(|&t| v[t * w..(t + 1) * w].iter().copied())
        .collect()
}

/// Parameters of one benchmark run.
pub struct BenchParams {
    pub tokens: Vec<usize>,
    pub iters: usize,
    pub rotate: usize,
    /// The bandwidth the floor divides by (GB/s) and where it comes from, in words.
    pub hbm_gbps: f64,
    pub floor_source: String,
    pub check: bool,
    /// wgpu only: decode GEMV layouts to compare on the same prepared layer, each over all
    /// token counts. Empty: the backend's own choice.
    pub gemv_layouts: Vec<crate::backend::wgpu::GemvConfig>,
    /// bf16 activations, as a bf16 model runs the layer (vLLM's gpt-oss; the peers take bf16
    /// inputs): hidden states rounded to bf16 values and the intermediates rounded to bf16
    /// (`Intermediate::Bf16`, the catalog's vLLM-parity cases); the CPU check does the same.
    pub bf16_activations: bool,
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
        intermediate: if p.bf16_activations {
            moe::Intermediate::Bf16
        } else {
            moe::Intermediate::F32
        },
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
    // Prepare once (the GPU uploads the weights; the CPU borrows them), timed on its own.
    let t_prep = Instant::now();
    let prepared = b.prepare(layer)?;
    for n in b.notes() {
        progress(&n);
    }
    let prepare_ms = t_prep.elapsed().as_secs_f64() * 1e3;
    let prepare_bytes = layer.weight_bytes() as u64;
    progress(&format!(
        "upload: prepare {:.1} MiB on {} in {prepare_ms:.1} ms",
        prepare_bytes as f64 / 1048576.0,
        b.name()
    ));
    let mut out = Vec::new();
    let layouts: Vec<Option<crate::backend::wgpu::GemvConfig>> = if p.gemv_layouts.is_empty() {
        vec![None]
    } else {
        p.gemv_layouts.iter().map(|l| Some(*l)).collect()
    };
    for layout in layouts {
        if let Some(l) = layout {
            let Backend::Wgpu(w) = b else {
                return Err(BackendError::Device(format!(
                    "GEMV layouts are a wgpu setting, not one of backend {}",
                    b.name()
                )));
            };
            let cfg = w
                .set_gemv_layout(l)
                .map_err(|e| BackendError::Device(format!("GEMV layout {l:?}: {e}")))?;
            progress(&format!("GEMV layout {cfg:?}"));
        }
        for case in catalog::bench_cases(shape, &p.tokens, p.rotate) {
            let Kind::Moe(mc) = &case.kind else {
                continue;
            };
            let mc = &catalog::MoeCase { opts, ..mc.clone() };
            let m = mc.m;
            let batches: Vec<(Vec<f32>, Vec<f32>)> =
                (0..mc.seeds.len()).map(|r| mc.batch(r)).collect();
            // The floor's bytes (the distinct local experts per batch) and the flops.
            let logits: Vec<&[f32]> = batches.iter().map(|(_, lg)| lg.as_slice()).collect();
            let cost = catalog::moe_cost(layer, m, &logits)?;
            let (bytes, flops) = (cost.weight_bytes, cost.flops);
            let active = bytes / per_expert;
            let batch = |bi: usize| {
                let (hs, lg) = &batches[bi % batches.len()];
                (hs.as_slice(), lg.as_slice())
            };
            // Check first (the first batch, or a sample of its tokens) against the CPU reference.
            let (hs0, lg0) = batch(0);
            let first = b.moe(&prepared, hs0, lg0, opts)?;
            let toks = check_sample(m);
            let want = if p.check {
                progress(&format!(
                    "M = {m}: checking {} token(s) on the CPU",
                    toks.len()
                ));
                Some(moe::forward(
                    layer,
                    &rows(hs0, h, &toks),
                    &rows(lg0, e, &toks),
                    opts,
                )?)
            } else {
                None
            };
            // One forward's (rel-L2, ids equal) against the reference, on the sampled tokens.
            let compare = |got: &crate::moe::MoeOutput, want: &crate::moe::MoeOutput| {
                let got_ids: Vec<i32> = toks
                    .iter()
                    .flat_map(|&t| got.routing.topk_ids[t * k..(t + 1) * k].iter().copied())
                    .collect();
                (
                    rel_l2(&rows(&got.output, h, &toks), &want.output).0,
                    got_ids == want.routing.topk_ids,
                )
            };
            let (mut rel, mut ids_match) = match &want {
                Some(w) => {
                    let (r, i) = compare(&first, w);
                    (Some(r), Some(i))
                }
                None => (None, None),
            };
            // Warm up, then time back to back: wall phase, then GPU-timestamp phase.
            progress(&format!("M = {m}: warm-up"));
            let warmup = warm_up(
                |n| b.moe(&prepared, batch(n).0, batch(n).1, opts).map(|_| ()),
                10,
            )?;
            let mut walls = Vec::new();
            let t_phase = Instant::now();
            while walls.len() < p.iters.max(1) || t_phase.elapsed().as_secs_f64() < TIMED_MIN_S {
                let (hs, lg) = batch(walls.len());
                let t0 = Instant::now();
                b.moe(&prepared, hs, lg, opts)?;
                walls.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            // GPU time: the forward as one span (the headline), then each pass on its own
            // (the breakdown).
            let mut gpu = Vec::new();
            let t_phase = Instant::now();
            while gpu.len() < p.iters.max(1) || t_phase.elapsed().as_secs_f64() < TIMED_MIN_S {
                let (hs, lg) = batch(gpu.len());
                match b.moe_timed(&prepared, hs, lg, opts, Timing::Forward)? {
                    (_, Some(span)) => gpu.push(span.iter().map(|(_, ms)| ms).sum::<f64>()),
                    (_, None) => break,
                }
            }
            let mut per_pass: Vec<(String, Vec<f64>)> = Vec::new();
            let mut pass_sums = Vec::new();
            let t_phase = Instant::now();
            while !gpu.is_empty()
                && (pass_sums.len() < p.iters.max(1)
                    || t_phase.elapsed().as_secs_f64() < TIMED_MIN_S)
            {
                let (hs, lg) = batch(pass_sums.len());
                match b.moe_timed(&prepared, hs, lg, opts, Timing::Passes)? {
                    (_, Some(passes)) => {
                        pass_sums.push(passes.iter().map(|(_, ms)| ms).sum::<f64>());
                        // Pass lists can differ in length between batches (a batch split across
                        // submits); keep the most common shape, the first one seen.
                        if per_pass.is_empty() {
                            per_pass = passes
                                .iter()
                                .map(|(n, _)| (n.clone(), Vec::new()))
                                .collect();
                        }
                        if passes.len() == per_pass.len() {
                            for ((_, v), (_, ms)) in per_pass.iter_mut().zip(&passes) {
                                v.push(*ms);
                            }
                        }
                    }
                    (_, None) => break,
                }
            }
            let passes: Vec<(String, f64)> =
                per_pass.into_iter().map(|(n, v)| (n, median(&v))).collect();
            // Host phases (upload, forward, readback), each ended by a wait; the output of such
            // a forward is the plain forward's.
            let mut phases: [Vec<f64>; 3] = Default::default();
            let (mut ph_sums, mut ph_walls, mut frees) = (Vec::new(), Vec::new(), Vec::new());
            let t_phase = Instant::now();
            while ph_walls.len() < p.iters.max(1) || t_phase.elapsed().as_secs_f64() < TIMED_MIN_S {
                let (hs, lg) = batch(ph_walls.len());
                let t0 = Instant::now();
                let (output, got) = b.moe_timed(&prepared, hs, lg, opts, Timing::Host)?;
                let wall = t0.elapsed().as_secs_f64() * 1e3;
                let t_free = Instant::now();
                drop(output);
                let free = t_free.elapsed().as_secs_f64() * 1e3;
                let Some(got) = got else { break };
                let mut sum = 0.0;
                for (v, name) in phases.iter_mut().zip(HOST_PHASES) {
                    let ms = got
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|x| x.1)
                        .ok_or_else(|| {
                            BackendError::Device(format!(
                                "backend {} reported host phases {got:?} without '{name}'",
                                b.name()
                            ))
                        })?;
                    v.push(ms);
                    sum += ms;
                }
                ph_sums.push(sum);
                ph_walls.push(wall);
                frees.push(free);
            }
            // The check batch again, after the timed loops: the worst forward counts.
            if let Some(w) = &want {
                for _ in 0..CHECK_REPEATS {
                    let (r, i) = compare(&b.moe(&prepared, hs0, lg0, opts)?, w);
                    rel = rel.map(|x| if r.is_nan() || r > x { r } else { x });
                    ids_match = ids_match.map(|x| x && i);
                }
            }
            let wall_r = min_med_max(&walls);
            let gpu_r = (!gpu.is_empty()).then(|| min_med_max(&gpu));
            let wall_ms = wall_r[1];
            let gpu_ms = gpu_r.map(|r| r[1]);
            let host_phases = (!ph_walls.is_empty()).then(|| {
                let [u, f, r] = phases.each_ref().map(|v| min_med_max(v));
                HostPhases {
                    upload_ms: u,
                    forward_ms: f,
                    readback_ms: r,
                    sum_ms: median(&ph_sums),
                    wall_ms: median(&ph_walls),
                    free_ms: min_med_max(&frees),
                    forward_host_ms: gpu_ms.map(|g| f[1] - g),
                    forwards: ph_walls.len(),
                }
            });
            let t = gpu_ms.unwrap_or(wall_ms);
            let floor_ms = bytes / (p.hbm_gbps * 1e9) * 1e3;
            let r = BenchResult {
                case: case.id.clone(),
                backend: b.name().into(),
                adapter: b.adapter(),
                notes: b.notes(),
                scheme: layer.config.scheme.name(),
                activations: if p.bf16_activations { "bf16" } else { "f32" }.into(),
                experts: e,
                hidden: h,
                inter: i,
                top_k: k,
                tokens: m,
                active_experts: active,
                weight_bytes: bytes,
                flops,
                wall_ms,
                wall_ms_range: wall_r,
                gpu_ms,
                gpu_ms_range: gpu_r,
                host_ms: gpu_ms.map(|g| wall_ms - g),
                host_phases,
                passes,
                passes_sum_ms: (!pass_sums.is_empty()).then(|| min_med_max(&pass_sums)[1]),
                timed_forwards: walls.len(),
                warmup,
                prepare_ms,
                prepare_bytes,
                floor_ms,
                floor_gbps: p.hbm_gbps,
                floor_source: p.floor_source.clone(),
                gbps: bytes / (t * 1e-3) / 1e9,
                tflops: flops / (t * 1e-3) / 1e12,
                ratio_to_floor: t / floor_ms,
                rel_l2_vs_cpu: rel,
                checked_tokens: if p.check { toks.len() } else { 0 },
                checked_forwards: if p.check { 1 + CHECK_REPEATS } else { 0 },
                ids_match,
            };
            progress(&format!(
            "M = {m}: wall {:.3} ms [{:.3}..{:.3}], gpu {}, floor {:.3} ms, {:.0} GB/s, {:.2} TFLOP/s, {:.1}x floor{}",
            r.wall_ms,
            wall_r[0],
            wall_r[2],
            r.gpu_ms_range.map_or("-".into(), |g| format!("{:.3} ms [{:.3}..{:.3}]", g[1], g[0], g[2])),
            r.floor_ms,
            r.gbps,
            r.tflops,
            r.ratio_to_floor,
            r.rel_l2_vs_cpu.map_or(String::new(), |x| format!(
                ", rel-L2 vs cpu {x:.2e} on {} token(s) x {} forwards, ids {}",
                r.checked_tokens,
                r.checked_forwards,
                if r.ids_match == Some(true) { "equal" } else { "DIFFER" }
            ))
        ));
            if let Some(hp) = &r.host_phases {
                progress(&format!(
                    "M = {m}: host phases (median ms over {} forwards, each ended by a wait): \
                     upload {:.3}, forward {:.3}{}, readback {:.3}; sum {:.3}, wall around them \
                     {:.3}; the output's free {:.3}",
                    hp.forwards,
                    hp.upload_ms[1],
                    hp.forward_ms[1],
                    hp.forward_host_ms.map_or(String::new(), |x| format!(
                        " (host overhead over GPU {x:.3})"
                    )),
                    hp.readback_ms[1],
                    hp.sum_ms,
                    hp.wall_ms,
                    hp.free_ms[1]
                ));
            }
            if !r.passes.is_empty() {
                let list: Vec<String> = r
                    .passes
                    .iter()
                    .map(|(n, ms)| format!("{n} {ms:.3}"))
                    .collect();
                progress(&format!(
                    "M = {m}: passes (median ms, timed one by one: sum {}): {}",
                    r.passes_sum_ms.map_or("-".into(), |x| format!("{x:.3}")),
                    list.join(", ")
                ));
            }
            out.push(r);
        }
    }
    Ok(out)
}
