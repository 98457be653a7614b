//! Per-stage verification: when a result also holds its intermediates, name the first stage of
//! the dataflow (docs/NUMERICS.md 10.3) where it leaves the reference.
//!
//! Stage tensors (optional, any subset; names and layouts in NUMERICS.md 10.6 and `mxmoe verify
//! --help`): `input_qdq_out` `[M, H]`, `gemm1_out` `[M*k, 2I]`, `act_out` `[M*k, I]`,
//! `intermediate_qdq_out` `[M*k, I]`, `gemm2_out` `[M*k, H]`. Per-slot rows are slot-major in the
//! result's own top-k order (row `t*k + j` is token t's j-th entry of `topk_ids`); with ids they
//! are matched to the reference's slots by expert id, without ids the reference's order is
//! assumed. The reference taps are [`crate::moe::StageTaps`].
//!
//! Each stage gets its own tolerance by the rule of the output (NUMERICS.md 10.5): per
//! legitimate variant, half the rel-L2 from the variant's tap to the nearest known fault's tap
//! that is distinguishable from noise at that stage (f64 against f32 accumulation), capped by the
//! tolerance cap. A stage agrees when it is within the tolerance of some legitimate variant.
//! The first stage that does not agree is reported, with the faults ranked by how close their
//! taps come to the result's at that stage.

use super::faults::Fault;
use super::rel_l2;
use super::verify::{VerifyError, VerifyOptions, NOISE_MARGIN};
use super::verify_report::{FaultDistance, VerifyReport};
use crate::io::TokenBatch;
use crate::moe::{self, Accumulate, MoeError, MoeLayer, MoeOptions, StageTaps};
use serde::Serialize;

/// A stage of the dataflow that a result can dump.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Stage {
    InputQdq,
    Gemm1,
    Act,
    InterQdq,
    Gemm2,
}

impl Stage {
    /// In dataflow order.
    pub const ALL: [Stage; 5] = [
        Stage::InputQdq,
        Stage::Gemm1,
        Stage::Act,
        Stage::InterQdq,
        Stage::Gemm2,
    ];

    /// The tensor name in a result file.
    pub const fn name(self) -> &'static str {
        match self {
            Stage::InputQdq => "input_qdq_out",
            Stage::Gemm1 => "gemm1_out",
            Stage::Act => "act_out",
            Stage::InterQdq => "intermediate_qdq_out",
            Stage::Gemm2 => "gemm2_out",
        }
    }

    /// What it holds, for messages and --help.
    pub const fn layout(self) -> &'static str {
        match self {
            Stage::InputQdq => "[M, H]: the input after the activation QDQ",
            Stage::Gemm1 => "[M*k, 2I]: GEMM1 + bias (x router weight when applied on the input)",
            Stage::Act => "[M*k, I]: the activation output, before the intermediate QDQ",
            Stage::InterQdq => "[M*k, I]: the intermediate after QDQ (GEMM2's input)",
            Stage::Gemm2 => "[M*k, H]: GEMM2 + bias, x router weight",
        }
    }

    fn per_slot(self) -> bool {
        self != Stage::InputQdq
    }

    /// Row width for a layer.
    fn width(self, layer: &MoeLayer) -> usize {
        let c = &layer.config;
        match self {
            Stage::InputQdq | Stage::Gemm2 => c.hidden,
            Stage::Gemm1 => 2 * c.inter,
            Stage::Act | Stage::InterQdq => c.inter,
        }
    }

    fn tap(self, t: &StageTaps) -> &[f32] {
        match self {
            Stage::InputQdq => &t.input_q,
            Stage::Gemm1 => &t.gemm1,
            Stage::Act => &t.act,
            Stage::InterQdq => &t.inter_q,
            Stage::Gemm2 => &t.gemm2,
        }
    }

    pub fn from_name(n: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.name() == n)
    }
}

/// The intermediates a result holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageDump {
    pub stages: Vec<(Stage, Vec<f32>)>,
}

impl StageDump {
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }
}

/// One stage of the comparison.
#[derive(Clone, Debug, Serialize)]
pub struct StageResult {
    pub stage: &'static str,
    /// Rows compared (per-slot stages: the slots matched to the reference's).
    pub rows: usize,
    /// Against the variant it is closest to (relative to that variant's tolerance).
    pub against: String,
    pub rel_l2: f64,
    pub max_abs: f64,
    pub tolerance: f64,
    pub agrees: bool,
    /// The known fault whose tap at this stage is closest to the result's.
    pub nearest_fault: Option<FaultDistance>,
}

fn all_bf16(v: &[f32]) -> bool {
    v.iter().all(|x| x.to_bits() & 0xFFFF == 0)
}

fn bf16(v: &[f32]) -> Vec<f32> {
    v.iter()
        .map(|&x| half::bf16::from_f32(x).to_f32())
        .collect()
}

/// Compare the dumped stages with the reference's taps and fill `stages`,
/// `first_differing_stage` and `stage_diagnosis` of the report (run after
/// [`super::verify::verify_with`] on the same inputs).
pub fn verify_stages(
    layer: &MoeLayer,
    batch: &TokenBatch,
    rep: &mut VerifyReport,
    dump: &StageDump,
    topk_ids: Option<&[i32]>,
    opts: &VerifyOptions,
) -> Result<(), VerifyError> {
    if dump.is_empty() {
        return Ok(());
    }
    let m = batch.m;
    let k = layer.config.router.top_k;
    for (s, v) in &dump.stages {
        let rows = if s.per_slot() { m * k } else { m };
        let want = rows * s.width(layer);
        if v.len() != want {
            return Err(VerifyError::Stage(format!(
                "{} has {} values, expected {} = {} ({})",
                s.name(),
                v.len(),
                want,
                if s.per_slot() { "M*k x width" } else { "M x H" },
                s.layout()
            )));
        }
    }
    let run = |fault: Option<Fault>,
               mode,
               intermediate,
               accumulate|
     -> Result<(StageTaps, Vec<i32>), MoeError> {
        let mut l = layer.clone();
        l.config.act_scale_mode = mode;
        let profile = match opts.profile.spec().modes.contains(&mode) {
            true => opts.profile,
            false => crate::format::ProfileId::Contract,
        };
        let o = MoeOptions {
            accumulate,
            intermediate,
            taps: true,
            profile,
        };
        let out = match fault {
            None => moe::forward(&l, &batch.hidden, &batch.logits, o)?,
            Some(f) => f.inject_opts(&l, batch, None, o)?,
        };
        Ok((out.stages.expect("taps requested"), out.routing.topk_ids))
    };
    // Legitimate variants: the reference taps, their f32-accumulation twins, the faults' taps.
    let legit: Vec<_> = rep
        .variants
        .iter()
        .filter(|v| v.legitimate)
        .cloned()
        .collect();
    let skipped: Vec<&str> = rep.skipped_faults.iter().map(|s| s.fault).collect();
    let faults: Vec<Fault> = Fault::ALL
        .into_iter()
        .filter(|f| *f != Fault::RoutingDiffers && !skipped.contains(&f.id()))
        .collect();
    struct Ref {
        id: String,
        taps: StageTaps,
        ids: Vec<i32>,
        noise: StageTaps,
        faults: Vec<(Fault, StageTaps)>,
    }
    let mut refs = Vec::new();
    for v in &legit {
        let (taps, ids) = run(None, v.scale_mode, v.intermediate, Accumulate::F64)?;
        let noise = run(None, v.scale_mode, v.intermediate, Accumulate::F32)?.0;
        let mut ft = Vec::new();
        for &f in &faults {
            ft.push((
                f,
                run(Some(f), v.scale_mode, v.intermediate, Accumulate::F64)?.0,
            ));
        }
        refs.push(Ref {
            id: v.id.clone(),
            taps,
            ids,
            noise,
            faults: ft,
        });
    }
    let Some(first) = refs.first() else {
        return Ok(());
    };
    // Their slot -> the reference slot with the same expert (None: not in the reference's set).
    let slot_of: Vec<Option<usize>> = (0..m * k)
        .map(|a| match topk_ids {
            None => Some(a),
            Some(ids) => {
                let t = a / k;
                let mine = &first.ids[t * k..(t + 1) * k];
                mine.iter().position(|&e| e == ids[a]).map(|p| t * k + p)
            }
        })
        .collect();
    let local = &first.taps.local;
    let mut results = Vec::new();
    for (s, theirs) in &dump.stages {
        let w = s.width(layer);
        // (their row, reference row) pairs to compare.
        let pairs: Vec<(usize, usize)> = if s.per_slot() {
            (0..m * k)
                .filter_map(|a| slot_of[a].filter(|&r| local[r]).map(|r| (a, r)))
                .collect()
        } else {
            (0..m).map(|t| (t, t)).collect()
        };
        let gather = |v: &[f32], their: bool| -> Vec<f32> {
            pairs
                .iter()
                .flat_map(|&(a, r)| {
                    let row = if their { a } else { r };
                    v[row * w..(row + 1) * w].iter().copied()
                })
                .collect()
        };
        let as_bf16 = all_bf16(theirs);
        let prep = |v: &[f32]| {
            let g = gather(v, false);
            if as_bf16 {
                bf16(&g)
            } else {
                g
            }
        };
        let th = gather(theirs, true);
        let mut best: Option<StageResult> = None;
        for r in &refs {
            let want = prep(s.tap(&r.taps));
            let noise = rel_l2(&prep(s.tap(&r.noise)), &want).0.max(1e-7);
            let mut nearest = f64::INFINITY;
            for (_, ft) in &r.faults {
                let d = rel_l2(&prep(s.tap(ft)), &want).0;
                if d > NOISE_MARGIN * noise && d < nearest {
                    nearest = d;
                }
            }
            let tol = (nearest / 2.0).min(opts.tolerance_cap);
            let (rel, max_abs) = rel_l2(&th, &want);
            let nf = r
                .faults
                .iter()
                .map(|(f, ft)| {
                    let (d, mx) = rel_l2(&th, &prep(s.tap(ft)));
                    FaultDistance {
                        fault: f.id(),
                        rel_l2: d,
                        max_abs: mx,
                    }
                })
                .min_by(|a, b| a.rel_l2.total_cmp(&b.rel_l2));
            let cand = StageResult {
                stage: s.name(),
                rows: pairs.len(),
                against: r.id.clone(),
                rel_l2: rel,
                max_abs,
                tolerance: tol,
                agrees: rel <= tol,
                nearest_fault: nf,
            };
            let score = |x: &StageResult| (!x.agrees, x.rel_l2 / x.tolerance);
            if best.as_ref().is_none_or(|b| score(&cand) < score(b)) {
                best = Some(cand);
            }
        }
        results.push((*s, best.expect("a legitimate variant")));
    }
    results.sort_by_key(|(s, _)| Stage::ALL.iter().position(|x| x == s));
    let first_bad = if rep.ids_identical == Some(false) {
        Some(("routing", None))
    } else {
        results
            .iter()
            .find(|(_, r)| !r.agrees)
            .map(|(s, r)| (s.name(), Some((*s, r.against.clone()))))
    };
    rep.first_differing_stage = first_bad.as_ref().map(|(n, _)| *n);
    rep.stage_diagnosis = match first_bad.and_then(|(_, x)| x) {
        Some((s, against)) => {
            let r = refs.iter().find(|r| r.id == against).expect("variant");
            let theirs = &dump.stages.iter().find(|(x, _)| *x == s).expect("stage").1;
            let w = s.width(layer);
            let rows: Vec<(usize, usize)> = if s.per_slot() {
                (0..m * k)
                    .filter_map(|a| slot_of[a].filter(|&x| local[x]).map(|x| (a, x)))
                    .collect()
            } else {
                (0..m).map(|t| (t, t)).collect()
            };
            let g = |v: &[f32], their: bool| -> Vec<f32> {
                rows.iter()
                    .flat_map(|&(a, x)| {
                        let row = if their { a } else { x };
                        v[row * w..(row + 1) * w].iter().copied()
                    })
                    .collect()
            };
            let th = g(theirs, true);
            let mut d: Vec<FaultDistance> = r
                .faults
                .iter()
                .map(|(f, ft)| {
                    let (rel, mx) = rel_l2(&th, &g(s.tap(ft), false));
                    FaultDistance {
                        fault: f.id(),
                        rel_l2: rel,
                        max_abs: mx,
                    }
                })
                .collect();
            d.sort_by(|a, b| a.rel_l2.total_cmp(&b.rel_l2));
            d.sort_by_key(|x| x.rel_l2.is_nan());
            d
        }
        None => Vec::new(),
    };
    rep.stages = results.into_iter().map(|(_, r)| r).collect();
    Ok(())
}

#[cfg(test)]
#[path = "verify_stages_tests.rs"]
mod tests;
