//! Verifying a MoE result produced elsewhere (vLLM, SGLang, your kernel) against the reference
//! (`mxmoe verify`), and the agreement test of one backend's output against the reference.
//!
//! [`verify`] judges a result against **named reference variants** (docs/NUMERICS.md 10.5):
//! `contract` (the layer's scale mode, f32 intermediates) and `vllm_bf16` (the same with bf16
//! intermediates, vLLM's precision) are legitimate; the other scale modes are computed and
//! reported but are faults. Each legitimate variant gets its own tolerance, derived on the same
//! layer and batch from its noise (f64 against f32 accumulation) and from the nearest known
//! fault ([`super::faults`]): half the distance to that fault, so that a legitimate run passes
//! and every distinguishable fault fails. A mismatch is diagnosed by re-running the reference
//! with each known fault injected: the diagnosis lists the faults, closest first.
//!
//! Routing is compared per token as **sets** of experts with their weights (top-k order does
//! not matter); ids and weights are optional ([`verify_output`] takes slices).

use super::faults::Fault;
pub use super::verify_report::{
    FaultDistance, Skipped, TensorError, Variant, Verdict, VerifyReport, WorstElement,
};
use super::{rel_l2, MOE_REL_L2};
use crate::format::{ProfileId, ScaleMode};
use crate::io::{MoeResult, TokenBatch};
use crate::moe::{
    self, Accumulate, Intermediate, MoeError, MoeLayer, MoeOptions, MoeOutput, Routing,
};

/// Bound on the rel-L2 of the routing weights (aligned by expert id) against the reference's.
pub const ROUTING_WEIGHTS_REL_L2: f64 = 1e-4;
/// A fault whose output is within this many times a variant's noise of the variant's output
/// cannot be told apart from it on this layer and batch; it does not set the tolerance.
pub const NOISE_MARGIN: f64 = 4.0;

/// Why a result could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The result's `output` is not `[M, H]` of the batch and layer.
    #[error("output is [{got_m}, {got_h}], expected [M = {m}, H = {h}]")]
    Shape {
        got_m: usize,
        got_h: usize,
        m: usize,
        h: usize,
    },
    /// The output slice does not hold `M * H` values.
    #[error("output has {got} values, expected [M = {m}, H = {h}] = {}", .m * .h)]
    Length { got: usize, m: usize, h: usize },
    /// The routing ids or weights are not `[M, k]`, or an id is not an expert of the layer.
    #[error("{0}")]
    Routing(String),
    /// A stage tensor of the result has the wrong size.
    #[error("{0}")]
    Stage(String),
    /// The reference could not run (an invalid layer or batch).
    #[error(transparent)]
    Moe(#[from] MoeError),
}

/// What the caller accepts as legitimate, and the tolerance cap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VerifyOptions {
    /// Upper bound on every variant's tolerance (rel-L2).
    pub tolerance_cap: f64,
    /// Accept `vllm_bf16` (bf16 intermediates). Without it, bf16 intermediates are the fault
    /// `bf16_intermediates`.
    pub accept_bf16: bool,
    /// The compatibility profile the reference runs under (`--profile`, NUMERICS.md 17): the
    /// activation QDQs of every variant and fault use it where the peer has the scale mode.
    pub profile: ProfileId,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            tolerance_cap: 1e-2,
            accept_bf16: true,
            profile: ProfileId::Contract,
        }
    }
}

/// Compare `theirs` with the reference; `tolerance` caps every variant's tolerance.
pub fn verify(
    layer: &MoeLayer,
    batch: &TokenBatch,
    theirs: &MoeResult,
    tolerance: f64,
) -> Result<VerifyReport, VerifyError> {
    let opts = VerifyOptions {
        tolerance_cap: tolerance,
        ..VerifyOptions::default()
    };
    verify_result(layer, batch, theirs, &opts)
}

/// [`verify`] with options.
pub fn verify_result(
    layer: &MoeLayer,
    batch: &TokenBatch,
    theirs: &MoeResult,
    opts: &VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    let h = layer.config.hidden;
    if theirs.m != batch.m || theirs.hidden != h {
        return Err(VerifyError::Shape {
            got_m: theirs.m,
            got_h: theirs.hidden,
            m: batch.m,
            h,
        });
    }
    verify_with(
        layer,
        batch,
        &theirs.output,
        Some(&theirs.routing.topk_ids),
        Some(&theirs.routing.topk_weights),
        opts,
    )
}

/// [`verify`] on slices: `output` `[M, H]`, and the top-k ids and weights `[M, k]` when the
/// result has them (the Python package's `verify`); `tolerance` caps the tolerances.
pub fn verify_output(
    layer: &MoeLayer,
    batch: &TokenBatch,
    output: &[f32],
    topk_ids: Option<&[i32]>,
    topk_weights: Option<&[f32]>,
    tolerance: f64,
) -> Result<VerifyReport, VerifyError> {
    let opts = VerifyOptions {
        tolerance_cap: tolerance,
        ..VerifyOptions::default()
    };
    verify_with(layer, batch, output, topk_ids, topk_weights, &opts)
}

/// The routing of a result against the reference's, per token as sets.
struct RoutingCmp {
    same_tokens: usize,
    ids_differ: usize,
    weights_rel_l2: Option<f64>,
}

fn compare_routing(
    want: &Routing,
    ids: &[i32],
    weights: Option<&[f32]>,
) -> Result<RoutingCmp, VerifyError> {
    let k = want.top_k;
    let m = want.tokens();
    if ids.len() != m * k {
        return Err(VerifyError::Routing(format!(
            "topk_ids has {} values, expected [M = {m}, k = {k}] = {}",
            ids.len(),
            m * k
        )));
    }
    if let Some(w) = weights {
        if w.len() != m * k {
            return Err(VerifyError::Routing(format!(
                "topk_weights has {} values, expected [M = {m}, k = {k}] = {}",
                w.len(),
                m * k
            )));
        }
    }
    let (mut same_tokens, mut ids_differ) = (0, 0);
    // Their weights reordered into the reference's slot order (where the ids are the same).
    let mut aligned = vec![f32::NAN; m * k];
    for t in 0..m {
        let (mine, theirs) = (&want.topk_ids[t * k..][..k], &ids[t * k..][..k]);
        let missing = theirs.iter().filter(|e| !mine.contains(e)).count();
        ids_differ += missing;
        let dup = (1..k).any(|j| theirs[..j].contains(&theirs[j]));
        if missing == 0 && !dup {
            same_tokens += 1;
        }
        if let Some(w) = weights {
            for (j, e) in theirs.iter().enumerate() {
                if let Some(p) = mine.iter().position(|x| x == e) {
                    aligned[t * k + p] = w[t * k + j];
                }
            }
        }
    }
    let weights_rel_l2 =
        (weights.is_some() && same_tokens == m).then(|| rel_l2(&aligned, &want.topk_weights).0);
    Ok(RoutingCmp {
        same_tokens,
        ids_differ,
        weights_rel_l2,
    })
}

/// [`verify`] on slices, with options.
pub fn verify_with(
    layer: &MoeLayer,
    batch: &TokenBatch,
    output: &[f32],
    topk_ids: Option<&[i32]>,
    topk_weights: Option<&[f32]>,
    opts: &VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    let h = layer.config.hidden;
    let m = moe::reference::check_batch(layer, &batch.hidden, &batch.logits)?;
    if output.len() != m * h {
        return Err(VerifyError::Length {
            got: output.len(),
            m,
            h,
        });
    }
    let own_mode = layer.config.act_scale_mode;
    // Under a profile, the layer's own mode must be one the peer has; the other modes' variants
    // (faults anyway) run under the contract where the peer lacks them.
    let profile = opts.profile.spec();
    if let Some(f) = layer.config.scheme.activation {
        profile.check(f, own_mode).map_err(MoeError::from)?;
    }
    let profile_of = |mode: ScaleMode| match profile.modes.contains(&mode) {
        true => opts.profile,
        false => ProfileId::Contract,
    };
    let run = |mode: ScaleMode, intermediate, accumulate| -> Result<MoeOutput, MoeError> {
        let mut lv = layer.clone();
        lv.config.act_scale_mode = mode;
        let o = MoeOptions {
            accumulate,
            intermediate,
            taps: false,
            profile: profile_of(mode),
        };
        moe::forward(&lv, &batch.hidden, &batch.logits, o)
    };
    // A result written in bf16 (every value a bf16) is compared with bf16-rounded references.
    let bf16_output = output.iter().all(|v| v.to_bits() & 0xFFFF == 0);
    let as_written = |mut o: MoeOutput| {
        if bf16_output {
            o.output
                .iter_mut()
                .for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
        }
        o
    };
    let bit_exact = |o: &[f32]| {
        output
            .iter()
            .zip(o)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    };
    let mut exact = Vec::new();
    // rel-L2 and max abs against the contract as computed (not rounded to bf16).
    let mut raw_contract = (f64::NAN, f64::NAN);

    // 1. Every scale mode x {f32, bf16} intermediates (f64 accumulation).
    let mut variants = Vec::new();
    let mut outs: Vec<MoeOutput> = Vec::new();
    for intermediate in [Intermediate::F32, Intermediate::Bf16] {
        for scale_mode in ScaleMode::ALL {
            let r = run(scale_mode, intermediate, Accumulate::F64)?;
            exact.push(bit_exact(&r.output));
            if scale_mode == own_mode && intermediate == Intermediate::F32 {
                raw_contract = rel_l2(output, &r.output);
            }
            let r = as_written(r);
            let (rel, max_abs) = rel_l2(output, &r.output);
            let own = scale_mode == own_mode;
            let id = match (own, intermediate) {
                (true, Intermediate::F32) => "contract".to_string(),
                (true, Intermediate::Bf16) => "vllm_bf16".to_string(),
                _ => format!("{}_scales_{}", scale_mode.name(), intermediate.name()),
            };
            variants.push(Variant {
                id,
                legitimate: own && (intermediate == Intermediate::F32 || opts.accept_bf16),
                scale_mode,
                intermediate,
                rel_l2: rel,
                max_abs,
                noise: None,
                nearest_fault: None,
                indistinguishable: Vec::new(),
                tolerance: None,
            });
            outs.push(r);
        }
    }
    let slot = |mode: ScaleMode, inter: Intermediate| {
        let i = ScaleMode::ALL.iter().position(|&x| x == mode).unwrap_or(0);
        i + if inter == Intermediate::Bf16 { 4 } else { 0 }
    };
    let contract = &outs[slot(own_mode, Intermediate::F32)];
    let want = &contract.routing;

    // 2. Routing.
    let rc = topk_ids
        .map(|ids| compare_routing(want, ids, topk_weights))
        .transpose()?;
    let ids_identical = rc.as_ref().map(|r| r.same_tokens == m);
    let routing_weights_rel_l2 = rc.as_ref().and_then(|r| r.weights_rel_l2);
    let weights_ok = match (topk_weights, routing_weights_rel_l2) {
        (None, _) => true,
        (Some(_), Some(w)) => w <= ROUTING_WEIGHTS_REL_L2,
        (Some(_), None) => topk_ids.is_none(), // weights without ids cannot be aligned
    };
    let routing_agrees = ids_identical != Some(false) && weights_ok;

    // 3. The faults' outputs (reusing the variants' runs where a fault is a variant).
    let mut skipped = Vec::new();
    let mut probes: Vec<(Fault, MoeOutput)> = Vec::new();
    for f in Fault::ALL {
        if let Some(why) = f.not_applicable(layer) {
            skipped.push(Skipped {
                fault: f.id(),
                why: why.into(),
            });
            continue;
        }
        let out = match f {
            Fault::Bf16Intermediates if opts.accept_bf16 => {
                skipped.push(Skipped {
                    fault: f.id(),
                    why: "bf16 intermediates are the legitimate variant vllm_bf16".into(),
                });
                continue;
            }
            Fault::RoutingDiffers if ids_identical != Some(false) => {
                skipped.push(Skipped {
                    fault: f.id(),
                    why: if topk_ids.is_none() {
                        "the result gives no routing ids".into()
                    } else {
                        "the result's expert sets equal the reference's".into()
                    },
                });
                continue;
            }
            Fault::RoutingDiffers => {
                // Their ids, with their weights if given, else the reference's slot weights.
                let theirs = Routing {
                    top_k: want.top_k,
                    topk_ids: topk_ids.unwrap_or_default().to_vec(),
                    topk_weights: topk_weights.unwrap_or(&want.topk_weights).to_vec(),
                };
                f.inject_with(layer, batch, Some(&theirs), opts.profile)?
            }
            Fault::ActivationScaleMode(mode) => outs[slot(mode, Intermediate::F32)].clone(),
            Fault::Bf16Intermediates => outs[slot(own_mode, Intermediate::Bf16)].clone(),
            _ => f.inject_with(layer, batch, None, opts.profile)?,
        };
        probes.push((f, as_written(out)));
    }

    // 4. Per legitimate variant: noise, the nearest distinguishable fault, the tolerance.
    for (vi, v) in variants.iter_mut().enumerate() {
        if !v.legitimate {
            continue;
        }
        let vout = &outs[vi].output;
        let r32 = as_written(run(v.scale_mode, v.intermediate, Accumulate::F32)?);
        let noise = rel_l2(&r32.output, vout).0.max(1e-7);
        let mut nearest: Option<FaultDistance> = None;
        for (f, fo) in &probes {
            if *f == Fault::RoutingDiffers {
                continue; // judged on the ids
            }
            let (d, max_abs) = rel_l2(&fo.output, vout);
            if d.is_nan() || d <= NOISE_MARGIN * noise {
                v.indistinguishable.push(f.id().to_string());
            } else if nearest.as_ref().is_none_or(|n| d < n.rel_l2) {
                nearest = Some(FaultDistance {
                    fault: f.id(),
                    rel_l2: d,
                    max_abs,
                });
            }
        }
        let tol = nearest.as_ref().map_or(opts.tolerance_cap, |n| {
            (n.rel_l2 / 2.0).min(opts.tolerance_cap)
        });
        v.noise = Some(noise);
        v.nearest_fault = nearest;
        v.tolerance = Some(tol);
    }

    // 5. The verdict: the legitimate variant with the smallest rel-L2 / tolerance that holds.
    let mut matched: Option<usize> = None;
    let mut best = f64::INFINITY;
    for (i, v) in variants.iter().enumerate() {
        if let Some(t) = v.tolerance {
            let ratio = if v.rel_l2 == 0.0 { 0.0 } else { v.rel_l2 / t };
            if v.rel_l2 <= t && ratio < best {
                best = ratio;
                matched = Some(i);
            }
        }
    }
    let output_bit_exact = exact[slot(own_mode, Intermediate::F32)];
    let verdict = match matched {
        Some(i) if routing_agrees && exact[i] => Verdict::BitExact,
        Some(_) if routing_agrees => Verdict::WithinTolerance,
        _ => Verdict::Wrong,
    };
    let variant = verdict
        .passed()
        .then(|| matched.map(|i| variants[i].id.clone()));
    let variant = variant.flatten();

    // 6. Diagnosis: the result against every probe, closest first.
    let mut diagnosis = Vec::new();
    if !verdict.passed() {
        for (f, fo) in &probes {
            let (rel, max_abs) = rel_l2(output, &fo.output);
            diagnosis.push(FaultDistance {
                fault: f.id(),
                rel_l2: rel,
                max_abs,
            });
        }
        diagnosis.sort_by(|a, b| a.rel_l2.total_cmp(&b.rel_l2));
        // A NaN rel-L2 explains nothing: keep those last (total_cmp puts +NaN last already,
        // -NaN first).
        diagnosis.sort_by_key(|d| d.rel_l2.is_nan());
    }
    let diagnosis_margin = match diagnosis.as_slice() {
        [a, b, ..] => Some(b.rel_l2 - a.rel_l2),
        _ => None,
    };

    // 7. Per-tensor errors, the worst element, the closest variant.
    let against = matched.unwrap_or(slot(own_mode, Intermediate::F32));
    let (rel, max_abs) = (variants[against].rel_l2, variants[against].max_abs);
    let mut tensors = vec![TensorError {
        name: "output",
        against: variants[against].id.clone(),
        rel_l2: rel,
        max_abs,
    }];
    if let Some(w) = routing_weights_rel_l2 {
        tensors.push(TensorError {
            name: "topk_weights",
            against: "contract".into(),
            rel_l2: w,
            max_abs: f64::NAN,
        });
    }
    let (mut wi, mut wv) = (0, 0f64);
    for (i, (a, b)) in output.iter().zip(&contract.output).enumerate() {
        let d = (*a as f64 - *b as f64).abs();
        if d > wv || d.is_nan() {
            wi = i;
            wv = d;
        }
    }
    let worst = WorstElement {
        token: wi / h,
        column: wi % h,
        theirs: output[wi],
        reference: contract.output[wi],
    };
    let mut closest: Option<usize> = None;
    for (i, v) in variants.iter().enumerate() {
        if v.rel_l2 < closest.map_or(f64::INFINITY, |c| variants[c].rel_l2) {
            closest = Some(i);
        }
    }
    let tolerance = variants[against].tolerance.unwrap_or(opts.tolerance_cap);
    Ok(VerifyReport {
        profile: opts.profile.name(),
        verdict,
        grade: verdict.name(),
        variant,
        diagnosis,
        diagnosis_margin,
        skipped_faults: skipped,
        tensors,
        ids_identical,
        ids_differ: rc.as_ref().map(|r| r.ids_differ),
        tokens_same_experts: rc.as_ref().map(|r| r.same_tokens),
        tokens: m,
        output_bf16: bf16_output,
        ids_total: want.topk_ids.len(),
        routing_weights_rel_l2,
        routing_weights_tolerance: ROUTING_WEIGHTS_REL_L2,
        routing_agrees,
        contract_rel_l2: raw_contract.0,
        contract_max_abs: raw_contract.1,
        variants,
        closest,
        worst,
        output_bit_exact,
        tolerance,
        stages: Vec::new(),
        first_differing_stage: None,
        stage_diagnosis: Vec::new(),
    })
}

/// A backend's MoE output against a reference output: the output's rel-L2, and whether it
/// agrees (identical routing ids and rel-L2 within [`MOE_REL_L2`]).
pub fn agrees(got: &MoeOutput, want: &MoeOutput) -> (f64, bool) {
    let (rel, _) = rel_l2(&got.output, &want.output);
    (
        rel,
        rel <= MOE_REL_L2 && got.routing.topk_ids == want.routing.topk_ids,
    )
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
