//! The MoE layer on the GPU (shaders/moe_*.wgsl; moe_common.wgsl has the overview): one submit
//! per forward, no host round trips between passes, weights stay packed (dequantized in the GEMM
//! prologues).
//!
//! Passes: route -> lists (histogram, prefix sum, row lists, tile list) -> input QDQ
//! (quant.wgsl) -> gemm1 per weight chunk (bias, activation, intermediate QDQ fused) -> gemm2 per
//! weight chunk (bias, router weight) -> combine (slot order, no float atomics). The GEMV path
//! (tiles of 4 rows) replaces the GEMMs up to `Context::gemv_pairs_for` token-expert pairs
//! per expert; at decode sizes (up to `Context::own_lists_max` pairs) gemv1 builds the lists
//! itself and the `lists` pass is not recorded, and up to `FUSED_COMBINE_MAX_TOKENS` tokens
//! gemv2's last workgroup per column slice does the combine (no `combine` pass). Everything the
//! caller gets back (output, ids, weights, timestamps) comes back in one readback. A layer keeps
//! its last forward's buffers and bind groups (`FwdCache`), so a forward of the same batch size
//! only uploads its inputs and records the passes.
//!
//! Weights larger than one storage binding are split into chunks of whole experts, each its own
//! buffer. One dispatch of each expert pass reads up to four chunks (shaders/
//! moe_weights_multi.wgsl: a binding set per chunk, the loads pick the tile's expert's chunk):
//! a layer of C chunks runs ceil(C / chunks-per-pass) dispatches per pass, each skipping the
//! tiles of the other dispatches' experts. Where the adapter's storage-buffer limit does not
//! hold the extra bindings, every chunk gets its own dispatch (`Context::chunks_per_pass` = 1),
//! and so it does by default past decode sizes (`MULTI_CHUNK_MAX_PAIRS`: where a pass is long,
//! the multi-chunk loads' branch costs more than a dispatch).
//!
//! The forward's steps, by file: this one has [`forward`] (batches split into submits, the
//! inputs' upload, recording the passes, submission and readback, each step a function);
//! plan.rs what a forward runs (path, kernels, skipped passes, size checks, pipelines);
//! fwd_cache.rs its buffers and bind groups (kept by the layer between forwards); layer.rs the
//! resident weights ([`GpuLayer`], [`upload`], [`check_layer_sizes`]); prepass.rs kernel
//! k64p's pre-passes' binding lists and their standalone hook ([`coop_prepass`]). The layer's
//! and the pre-passes' public items are re-exported here (their paths under `moe::`).

use super::context::Context;
use super::fwd_cache::{word_bytes as bytes, FwdCache};
use super::host_profile;
use super::plan::{self, Plan};
use super::readback::Readback;
use super::timer::Timer;
use crate::backend::host_io::{pod_append, pod_vec, touched_vec, WRITE_PAR_MIN};
use crate::backend::{ops, BackendError, PassTimes};
use crate::moe::{MoeOptions, MoeOutput, Routing};

pub use super::layer::{check_layer_sizes, upload, GpuLayer, MAX_U32_BYTES};
pub use super::prepass::{
    coop_prepass, CoopPrepassOut, COOP64PW_BINDINGS, COOP64P_BINDINGS, COOPP_PREP1_BINDINGS,
    COOPP_PREP2_BINDINGS, GEMM_PRE_REF_BINDINGS,
};

/// Rows per GEMM tile (GEMM_TILE_ROWS in moe_gemm.wgsl) and per GEMV tile (GEMV_TILE_ROWS in
/// moe_gemv.wgsl).
pub(super) const TM: usize = 64;
pub(super) const TG: usize = 4;

/// Which expert kernels a forward uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MoePath {
    /// GEMV when there are few token-expert pairs (decode), GEMM otherwise.
    #[default]
    Auto,
    /// Grouped GEMM: tiles of 64 rows x 64 intermediate (gemm1) / 128 output (gemm2) columns.
    Gemm,
    /// Grouped GEMV: tiles of 4 rows, lanes along K, weights streamed once per tile.
    Gemv,
}

/// Intermediate columns per gemm1 workgroup, output columns per gemm2 workgroup, and the same
/// for the GEMV kernels.
const TN1: usize = 64;
const TN2: usize = 128;
const TN1_GEMV: usize = 32;
pub(super) const TN2_GEMV: usize = 64;
/// gemv1 builds the row lists itself (GEMV_OWN_LISTS in moe_gemv.wgsl) up to this many
/// token-expert pairs (its workgroup arrays).
pub(super) const GEMV_LIST_MAX: usize = 256;
/// moe_lists.wgsl's workgroup arrays hold this many local experts.
pub const MAX_LOCAL_EXPERTS: usize = 1024;

/// Records a forward's dispatches: untimed, all in ONE compute pass (wgpu-core tracks each
/// dispatch's bindings and records a barrier before a dispatch that reads or writes what an
/// earlier one wrote: storage read-write is not an "ordered" use on Vulkan, wgpu-hal
/// `get_ordered_buffer_usages`, so the passes' order and visibility are those of separate
/// passes); timed per pass, one pass per dispatch with its two timestamps (each pass's GPU
/// time); timed as a span (`span`), the untimed recording, its one pass with a timestamp at
/// its beginning and its end (what a forward costs as it runs untimed).
struct Recorder<'a> {
    enc: &'a mut wgpu::CommandEncoder,
    timer: Option<&'a mut Timer>,
    span: bool,
    one: Option<wgpu::ComputePass<'static>>,
}

impl Recorder<'_> {
    fn dispatch(
        &mut self,
        label: &str,
        pipe: &wgpu::ComputePipeline,
        bg: &wgpu::BindGroup,
        (x, y): (u32, u32),
    ) {
        let run = |p: &mut wgpu::ComputePass<'_>| {
            p.set_pipeline(pipe);
            p.set_bind_group(0, bg, &[]);
            p.dispatch_workgroups(x, y, 1);
        };
        match self.timer.as_deref_mut() {
            Some(t) if !self.span => run(&mut self.enc.begin_compute_pass(
                &wgpu::ComputePassDescriptor {
                    label: Some(label),
                    timestamp_writes: t.writes(label),
                },
            )),
            t => {
                // The pass no longer borrows the encoder (forget_lifetime); it is ended when the
                // recorder is dropped, before the encoder records anything else.
                let enc = &mut *self.enc;
                run(self.one.get_or_insert_with(|| {
                    enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: Some("moe"),
                        timestamp_writes: t.and_then(|t| t.writes("forward")),
                    })
                    .forget_lifetime()
                }))
            }
        }
    }
}

/// What a forward measures: nothing, the GPU (timestamps per pass and the span from the first
/// pass's beginning to the last one's end), the GPU span of the untimed recording (`Span`: its
/// one compute pass between two timestamps, so no pass boundary or timestamp of the
/// measurement's own sits between the dispatches), or the host time of its phases
/// ([`crate::backend::Timing::Host`]: each phase ends with a wait, and the times come back as
/// `("upload" | "forward" | "readback", ms)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwdTiming {
    Off,
    Gpu,
    Span,
    Host,
}

/// Logits of at least this many values are checked (finite) on another thread while the
/// inputs are written to the upload buffer (gpt-oss-120b, 2048 tokens: 1 MB, ~0.15 ms on the
/// H200's host, docs/h200-2026-12-01s6-wgpu); smaller ones first, on this thread.
const VALIDATE_PAR_MIN: usize = 1 << 16;

/// Hidden states of at least this many bytes are written to the upload buffer while another
/// thread records the forward's commands: where the write itself is split over rayon's threads
/// (`WRITE_PAR_MIN`; gpt-oss-120b from 365 tokens: the H200's host writes them at ~23 GB/s,
/// 1.1 ms at 2048 tokens, and wgpu-core's encoding at `finish` took 140-220 us there,
/// docs/h200-2026-12-01s6-wgpu); below it, one after the other (waking a thread would cost
/// about what the overlap saves).
const RECORD_PAR_MIN: usize = WRITE_PAR_MIN;

/// A forward's result: its output, the routing, and the GPU times (per pass, and the span).
type FwdResult = (MoeOutput, PassTimes, f64);

/// Run a resident layer on a token batch.
pub fn forward(
    ctx: &Context,
    g: &GpuLayer,
    hidden: &[f32],
    logits: &[f32],
    opts: MoeOptions,
    path: MoePath,
    timing: FwdTiming,
) -> Result<FwdResult, BackendError> {
    let timed = matches!(timing, FwdTiming::Gpu | FwdTiming::Span);
    let host = timing == FwdTiming::Host;
    let l = &g.config;
    // Batch shapes (the layer itself was validated at upload).
    let h = l.hidden;
    let m = ops::validate_moe(l, hidden, logits)?;
    // Batches whose activations exceed one binding (or the workgroup grid) run as several
    // submits over consecutive tokens; routing is per token, so this changes no result.
    let k = l.router.top_k;
    let max_binding = ctx.max_binding().min(MAX_U32_BYTES);
    let max_tokens = plan::max_tokens(ctx, l, max_binding)?;
    if m > max_tokens {
        let ne = l.n_experts;
        return in_pieces((m, h, k), max_tokens, host, |t0, t1| {
            forward(
                ctx,
                g,
                &hidden[t0 * h..t1 * h],
                &logits[t0 * ne..t1 * ne],
                opts,
                path,
                timing,
            )
        });
    }
    host_profile::once(|| match ctx.round_trip_probe(200) {
        Ok([lo, med, hi]) => format!(
            "round trip of a minimal submission (clear 4 bytes, copy them to a mappable \
             buffer, submit, wait, map) on {}: median {med:.1} us [{lo:.1}..{hi:.1}] over 200",
            ctx.info.adapter.name
        ),
        Err(e) => format!("round-trip probe failed: {e}"),
    });
    let t_start = std::time::Instant::now();
    host_profile::start();
    // The router's input checks (finite logits; the bias was checked at upload): here when
    // small, else beside the inputs' upload (below).
    let validate = || ops::validate_route(&l.router, logits, l.n_experts, None);
    let validate_early = logits.len() < VALIDATE_PAR_MIN;
    if validate_early {
        validate()?;
    }
    host_profile::mark("validate");
    let plan = plan::plan(ctx, g, m, opts, path, max_binding)?;
    host_profile::mark("pipelines");

    // Buffers and bind groups: the layer's cached set when this forward has the same key as the
    // last one (same batch size, path and pipelines), else a new set from the pool.
    let c = FwdCache::take(ctx, g, &plan);
    // The inputs go through the set's upload buffer (mapped while idle), copied into the
    // device buffers at the start of the forward's command buffer (Timing::Host: in a
    // submission of their own, waited for).
    let (logits_bytes, hidden_bytes): (&[u8], &[u8]) =
        (bytemuck::cast_slice(logits), bytemuck::cast_slice(hidden));
    let (nl, nh) = (logits_bytes.len() as u64, hidden_bytes.len() as u64);
    let t_setup = t_start.elapsed();
    let parts = [(0, logits_bytes), (c.hidden_off, hidden_bytes)];
    // The inputs into the upload buffer, the logits checked beside them when large.
    let fill = || {
        if validate_early {
            ctx.fill_upload(&c.upload, &parts)
        } else {
            let (v, f) = rayon::join(validate, || ctx.fill_upload(&c.upload, &parts));
            v.map_err(BackendError::from).and(f)
        }
    };
    for (b, &n) in c.bufs.iter().zip(&c.out_sizes) {
        ctx.maybe_poison(b, n);
    }
    let mut timer = if timed {
        ctx.timer(4 + 2 * plan.groups.len() as u32 + 2 * plan.prepass as u32)
    } else {
        None
    };
    let f = Fwd {
        ctx,
        g,
        plan: &plan,
        c: &c,
        nl,
        nh,
        span: timing == FwdTiming::Span,
    };
    let ran = if host {
        // Timing::Host: the upload, the passes and the readback, each a submission of its own,
        // waited for.
        f.run_host(fill, t_setup)
            .map(|(rb, phases)| (rb, None, Some(phases)))
    } else {
        f.run_overlapped(fill, &mut timer, hidden_bytes.len() >= RECORD_PAR_MIN)
            .map(|(rb, resolve)| (rb, resolve, None))
    };
    let (rb, resolve, phases) = match ran {
        Ok(r) => r,
        Err(e) => {
            c.give_back(ctx);
            return Err(e);
        }
    };
    // (Profile marks from this thread only: with the recording on another thread, this step
    // is the inputs' write and the recording together.)
    host_profile::mark("buffers_uploads_record");
    let t_rb0 = std::time::Instant::now();
    let uploads = if host { Vec::new() } else { vec![&c.upload] };
    let r = f.read(rb, &uploads, timer.as_ref());
    let rb_ms = t_rb0.elapsed().as_secs_f64() * 1e3;
    ctx.give(resolve);
    c.keep_or_give_back(ctx, g, r.is_ok());
    host_profile::mark("give");
    host_profile::finish(|| {
        format!(
            "moe {} m={m}{}",
            if plan.gemv { "gemv" } else { "gemm" },
            match timing {
                FwdTiming::Off => "",
                FwdTiming::Gpu => " timed",
                FwdTiming::Span => " timed span",
                FwdTiming::Host => " host phases",
            }
        )
    });
    let (output, topk_ids, topk_weights, mut times, span) = r?;
    if let Some((t_upload, fwd_ms)) = phases {
        times = vec![
            ("upload".to_string(), t_upload.as_secs_f64() * 1e3),
            ("forward".to_string(), fwd_ms),
            ("readback".to_string(), rb_ms),
        ];
    }
    Ok((
        MoeOutput {
            output,
            routing: Routing {
                top_k: k,
                topk_ids,
                topk_weights,
            },
            stages: None,
        },
        times,
        span,
    ))
}

/// A batch of `m` tokens (hidden size `h`, top-`k` routing) run as submits of at most
/// `max_tokens` tokens each (`run(t0, t1)`: the forward of tokens [t0, t1)), their outputs and
/// routing concatenated, their pass times appended (`host`: the host phases of the pieces added
/// up) and their spans added.
fn in_pieces(
    (m, h, k): (usize, usize, usize),
    max_tokens: usize,
    host: bool,
    mut run: impl FnMut(usize, usize) -> Result<FwdResult, BackendError>,
) -> Result<FwdResult, BackendError> {
    let mut out = Vec::with_capacity(m * h);
    let mut ids = Vec::with_capacity(m * k);
    let mut ws = Vec::with_capacity(m * k);
    let mut times = Vec::new();
    let mut span = 0.0;
    for t0 in (0..m).step_by(max_tokens) {
        let t1 = (t0 + max_tokens).min(m);
        let (o, t, sp) = run(t0, t1)?;
        out.extend(o.output);
        ids.extend(o.routing.topk_ids);
        ws.extend(o.routing.topk_weights);
        if host {
            // The phases of the pieces add up.
            for (n, ms) in t {
                match times.iter_mut().find(|(k, _)| *k == n) {
                    Some(e) => e.1 += ms,
                    None => times.push((n, ms)),
                }
            }
        } else {
            times.extend(t);
        }
        span += sp;
    }
    Ok((
        MoeOutput {
            output: out,
            routing: Routing {
                top_k: k,
                topk_ids: ids,
                topk_weights: ws,
            },
            stages: None,
        },
        times,
        span,
    ))
}

/// What a forward's output, routing and times come back as (see [`Fwd::read`]).
type Readout = (Vec<f32>, Vec<i32>, Vec<f32>, PassTimes, f64);

/// One forward's plan and buffer set: what its recording, submission and readback steps read.
struct Fwd<'a> {
    ctx: &'a Context,
    g: &'a GpuLayer,
    plan: &'a Plan<'a>,
    c: &'a FwdCache,
    /// Bytes of the logits and of the hidden states (the inputs' copies).
    nl: u64,
    nh: u64,
    /// The timer (if any) takes the span of the one untimed pass (FwdTiming::Span).
    span: bool,
}

impl Fwd<'_> {
    /// The forward's commands: the inputs' copies (`with_upload`), the passes, the timestamps'
    /// resolve (returns its buffer).
    fn record(
        &self,
        with_upload: bool,
        mut timer: Option<&mut Timer>,
    ) -> (wgpu::CommandEncoder, Option<wgpu::Buffer>) {
        let ctx = self.ctx;
        let mut enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("moe") });
        if with_upload {
            self.c.copy_inputs(&mut enc, self.nl, self.nh);
        }
        if self.plan.fuse_combine {
            // gemv2's slice counters start at zero (its last workgroups also reset them).
            enc.clear_buffer(self.c.counts(), 0, None);
        }
        {
            let timer = timer.as_deref_mut();
            let mut rec = Recorder {
                enc: &mut enc,
                timer,
                span: self.span,
                one: None,
            };
            self.dispatches(&mut rec);
            drop(rec);
        }
        let resolve = timer.map(|t| {
            let b = ctx.resolve_buffer(t.bytes());
            t.resolve(&mut enc, &b);
            b
        });
        (enc, resolve)
    }

    /// Every pass of the forward, in order: route, lists, input QDQ, then per expert stage
    /// kernel k64p's pre-pass and the stage's dispatches (one per group of weight chunks),
    /// then combine. The labels are the passes' timing names.
    fn dispatches(&self, rec: &mut Recorder) {
        let (ctx, plan, c) = (self.ctx, self.plan, self.c);
        let (p, m, na) = (&plan.p, plan.m, plan.na);
        let (h, inter) = (self.g.config.hidden, self.g.config.inter);
        rec.dispatch("route", &p.route, &c.bg_route, ctx.grid(m as u32));
        if let Some(bg) = &c.bg_lists {
            rec.dispatch("moe/lists", &p.lists, bg, (1, 1));
        }
        // Input QDQ, once per token.
        if let (Some(pq), Some(bg)) = (&p.qdq, &c.bg_qdq) {
            rec.dispatch(
                "moe/input_qdq",
                pq,
                bg,
                ctx.grid((m * h / 32).div_ceil(8) as u32),
            );
        }
        let nc = plan.groups.len();
        let gemv = plan.gemv;
        let stages = [
            (&p.g1, plan.e1, if gemv { TN1_GEMV } else { TN1 }, inter),
            (&p.g2, plan.e2, if gemv { TN2_GEMV } else { TN2 }, h),
        ];
        for (si, (pipe, label, tn, cols)) in stages.into_iter().enumerate() {
            // Kernel k64p: the stage's activations converted once (one workgroup per token, then
            // per GEMM row).
            if let (Some((pp1, pp2)), Some((bp1, bp2))) = (&p.prep, &c.bg_prep) {
                let (pp, bp, n, name) = if si == 0 {
                    (pp1, bp1, m, "moe/prep1")
                } else {
                    (pp2, bp2, na, "moe/prep2")
                };
                rec.dispatch(name, pp, bp, ctx.grid(n as u32));
            }
            let name = format!("moe/{label}");
            for bg in &c.bg_stages[si * nc..(si + 1) * nc] {
                rec.dispatch(
                    &name,
                    pipe,
                    bg,
                    (plan.max_tiles as u32, cols.div_ceil(tn) as u32),
                );
            }
        }
        if !plan.fuse_combine {
            rec.dispatch(
                "moe/combine",
                &p.comb,
                &c.bg_comb,
                ctx.grid((m * h).div_ceil(256) as u32),
            );
        }
    }

    /// What comes back: output, ids, weights (and the timestamps), one copy each.
    fn readback(
        &self,
        enc: wgpu::CommandEncoder,
        timer: Option<&Timer>,
        resolve: &Option<wgpu::Buffer>,
    ) -> Readback {
        let (m, na, h) = (self.plan.m, self.plan.na, self.g.config.hidden);
        let c = self.c;
        let mut reads = vec![
            (c.out(), bytes(m * h)),
            (c.ids(), bytes(na)),
            (c.topw(), bytes(na)),
        ];
        if let (Some(t), Some(b)) = (timer, resolve) {
            reads.push((b, t.bytes()));
        }
        self.ctx.encode_readback(enc, &reads)
    }

    /// Timing::Host: the inputs' upload (`fill`, then their copies), the passes, each a
    /// submission of its own, waited for; the readback recorded. Returns it with the upload's
    /// time and the forward's (ms, `t_setup` included).
    fn run_host(
        &self,
        fill: impl FnOnce() -> Result<(), BackendError>,
        t_setup: std::time::Duration,
    ) -> Result<(Readback, (std::time::Duration, f64)), BackendError> {
        let ctx = self.ctx;
        let t_up0 = std::time::Instant::now();
        fill().and_then(|()| {
            let mut enc = ctx
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("moe upload"),
                });
            self.c.copy_inputs(&mut enc, self.nl, self.nh);
            ctx.submit_wait(enc, &[&self.c.upload])
        })?;
        let t_upload = t_up0.elapsed();
        let t_fwd0 = std::time::Instant::now();
        let (enc, _) = self.record(false, None);
        host_profile::mark("record");
        ctx.submit_wait(enc, &[])?;
        let fwd_ms = (t_setup + t_fwd0.elapsed()).as_secs_f64() * 1e3;
        let enc = ctx
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("moe readback"),
            });
        Ok((self.readback(enc, None, &None), (t_upload, fwd_ms)))
    }

    /// The commands are recorded (and wgpu-core encodes them) with the readback while the
    /// inputs are written to the upload buffer (`fill`), on other threads when `par` (large
    /// inputs; copies from a mapped buffer may be recorded; it must be unmapped by the submit).
    /// Returns the readback and the timestamps' resolve buffer.
    fn run_overlapped(
        &self,
        fill: impl FnOnce() -> Result<(), BackendError> + Send,
        timer: &mut Option<Timer>,
        par: bool,
    ) -> Result<(Readback, Option<wgpu::Buffer>), BackendError> {
        let mut work = || {
            let (enc, resolve) = self.record(true, timer.as_mut());
            let rb = self.readback(enc, timer.as_ref(), &resolve);
            (rb, resolve)
        };
        let (filled, (rb, resolve)) = if par {
            rayon::join(fill, work)
        } else {
            (fill(), work())
        };
        if let Err(e) = filled {
            drop(rb);
            self.ctx.give(resolve);
            return Err(e);
        }
        Ok((rb, resolve))
    }

    /// Submit the readback (after the `uploads` it reads) and wait: the output (its destination
    /// allocated, its pages faulted in, while the device works), ids, weights, and the pass
    /// times and span from `timer`'s timestamps.
    fn read(
        &self,
        rb: Readback,
        uploads: &[&super::buffers::Upload],
        timer: Option<&Timer>,
    ) -> Result<Readout, BackendError> {
        let ctx = self.ctx;
        let mh = self.plan.m * self.g.config.hidden;
        let period = ctx.queue.get_timestamp_period();
        ctx.submit_readback(
            rb,
            uploads,
            || touched_vec::<f32>(mh),
            mh * 4 >= WRITE_PAR_MIN,
            // The output, in the order of its pieces (see Context::submit_readback).
            |output, _, piece| pod_append(output, piece),
            |parts, output| {
                let (times, span) = match timer {
                    Some(t) => (t.durations(parts[3], period), t.span(parts[3], period)),
                    None => (Vec::new(), 0.0),
                };
                (
                    output,
                    pod_vec::<i32>(parts[1]),
                    pod_vec::<f32>(parts[2]),
                    times,
                    span,
                )
            },
        )
    }
}
