//! Verifying a MoE result produced elsewhere (vLLM, SGLang, your kernel) against the reference
//! (`mxmoe verify`), and the agreement test of one backend's output against the reference.
//!
//! [`verify`] runs the f64 reference under every activation scale mode, with f32 and with bf16
//! intermediates, and returns a [`VerifyReport`]: the routing agreement, the error against each
//! variant and which one is closest, the worst element against the contract (the layer's own
//! scale mode, f32 intermediates), and a [`Verdict`]. Printing it is the caller's business; the
//! report serializes to JSON. [`verify_output`] is the same on slices, for a result whose
//! producer does not report its routing ids or weights (the Python package's `verify`).

use super::{rel_l2, MOE_REL_L2};
use crate::format::ScaleMode;
use crate::io::{MoeResult, TokenBatch};
use crate::moe::{self, Accumulate, Intermediate, MoeError, MoeLayer, MoeOptions, MoeOutput};
use serde::{Serialize, Serializer};

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
    /// The reference could not run (an invalid layer or batch).
    #[error(transparent)]
    Moe(#[from] MoeError),
}

/// The outcome of a verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Identical routing ids and every output bit equal to the contract reference.
    BitExact,
    /// Identical routing ids and the output within the tolerance of the contract reference.
    WithinTolerance,
    /// Routing differs, or the output is further than the tolerance.
    Wrong,
}

impl Verdict {
    pub const fn name(self) -> &'static str {
        match self {
            Verdict::BitExact => "BIT-EXACT",
            Verdict::WithinTolerance => "WITHIN TOLERANCE",
            Verdict::Wrong => "WRONG",
        }
    }

    pub const fn passed(self) -> bool {
        !matches!(self, Verdict::Wrong)
    }
}

impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

fn ser_mode<S: Serializer>(m: &ScaleMode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.name())
}

fn ser_inter<S: Serializer>(i: &Intermediate, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(i.name())
}

/// The result against one reference variant (f64 accumulation).
#[derive(Clone, Debug, Serialize)]
pub struct Variant {
    #[serde(serialize_with = "ser_mode")]
    pub scale_mode: ScaleMode,
    #[serde(serialize_with = "ser_inter")]
    pub intermediate: Intermediate,
    pub rel_l2: f64,
    pub max_abs: f64,
}

impl Variant {
    /// E.g. `even scales, f32 intermediates`.
    pub fn name(&self) -> String {
        format!(
            "{} scales, {} intermediates",
            self.scale_mode,
            self.intermediate.name()
        )
    }
}

/// The element furthest from the contract reference (a NaN difference counts as furthest).
#[derive(Clone, Debug, Serialize)]
pub struct WorstElement {
    pub token: usize,
    pub column: usize,
    pub theirs: f32,
    pub reference: f32,
}

/// Everything `mxmoe verify` reports.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// The result's top-k ids equal the reference's (same k, every slot); `None` when the
    /// result gave no ids (then the routing does not enter the verdict).
    pub ids_identical: Option<bool>,
    /// Slots whose id differs (compared up to the shorter of the two); `None` without ids.
    pub ids_differ: Option<usize>,
    /// Slots of the reference (`M * top_k`).
    pub ids_total: usize,
    /// Relative L2 of the routing weights against the reference; `None` without weights.
    pub routing_weights_rel_l2: Option<f64>,
    /// Every reference variant: intermediates f32 then bf16, each under every scale mode.
    pub variants: Vec<Variant>,
    /// Index into `variants` of the smallest rel-L2 (`None` when every rel-L2 is NaN).
    pub closest: Option<usize>,
    /// The rel-L2 against the contract reference (the layer's scale mode, f32 intermediates).
    pub contract_rel_l2: f64,
    /// The largest absolute difference from the contract reference.
    pub contract_max_abs: f64,
    pub worst: WorstElement,
    /// Every output bit equals the contract reference's.
    pub output_bit_exact: bool,
    pub tolerance: f64,
    pub verdict: Verdict,
}

impl VerifyReport {
    pub fn closest(&self) -> Option<&Variant> {
        self.closest.map(|i| &self.variants[i])
    }

    /// The verdict line: `BIT-EXACT`, `WITHIN TOLERANCE (rel-L2 1.234e-3 <= 1e-2)` or
    /// `WRONG (rel-L2 1.234e-1 > 1e-2, routing differs)`.
    pub fn summary(&self) -> String {
        let (c, tol) = (self.contract_rel_l2, self.tolerance);
        let detail = match self.verdict {
            Verdict::BitExact => String::new(),
            Verdict::WithinTolerance => format!(" (rel-L2 {c:.3e} <= {tol:e})"),
            Verdict::Wrong => format!(
                " (rel-L2 {c:.3e} > {tol:e}{})",
                if self.ids_identical == Some(false) {
                    ", routing differs"
                } else {
                    ""
                }
            ),
        };
        format!("{}{detail}", self.verdict.name())
    }
}

/// Compare `theirs` with the reference forward of `layer` on `batch`; the verdict uses
/// `tolerance` as the rel-L2 bound of "within tolerance".
pub fn verify(
    layer: &MoeLayer,
    batch: &TokenBatch,
    theirs: &MoeResult,
    tolerance: f64,
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
    verify_output(
        layer,
        batch,
        &theirs.output,
        Some(&theirs.routing.topk_ids),
        Some(&theirs.routing.topk_weights),
        tolerance,
    )
}

/// [`verify`] on slices: `output` `[M, H]`, and the top-k ids and weights `[M, k]` when the
/// result has them. Without ids the routing does not enter the verdict and the report's
/// `ids_identical` and `ids_differ` are `None`; without weights `routing_weights_rel_l2` is.
pub fn verify_output(
    layer: &MoeLayer,
    batch: &TokenBatch,
    output: &[f32],
    topk_ids: Option<&[i32]>,
    topk_weights: Option<&[f32]>,
    tolerance: f64,
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
    // The contract reference: f64 accumulation, the layer's scale mode, f32 intermediates.
    let want = moe::forward(layer, &batch.hidden, &batch.logits, MoeOptions::default())?;
    let want_ids = &want.routing.topk_ids;
    let ids_identical = topk_ids.map(|ids| ids == want_ids.as_slice());
    let ids_differ = topk_ids.map(|ids| ids.iter().zip(want_ids).filter(|(a, b)| a != b).count());
    let routing_weights_rel_l2 = topk_weights.map(|w| rel_l2(w, &want.routing.topk_weights).0);
    let (contract_rel_l2, contract_max_abs) = rel_l2(output, &want.output);

    let contract_mode = layer.config.act_scale_mode;
    let mut variants = Vec::new();
    for intermediate in [Intermediate::F32, Intermediate::Bf16] {
        for scale_mode in ScaleMode::ALL {
            let is_contract = scale_mode == contract_mode && intermediate == Intermediate::F32;
            let (rel, max_abs) = if is_contract {
                (contract_rel_l2, contract_max_abs)
            } else {
                let mut lv = layer.clone();
                lv.config.act_scale_mode = scale_mode;
                let opts = MoeOptions {
                    accumulate: Accumulate::F64,
                    intermediate,
                    ..MoeOptions::default()
                };
                let r = moe::forward(&lv, &batch.hidden, &batch.logits, opts)?;
                rel_l2(output, &r.output)
            };
            variants.push(Variant {
                scale_mode,
                intermediate,
                rel_l2: rel,
                max_abs,
            });
        }
    }
    let mut closest: Option<usize> = None;
    for (i, v) in variants.iter().enumerate() {
        if v.rel_l2 < closest.map_or(f64::INFINITY, |c| variants[c].rel_l2) {
            closest = Some(i);
        }
    }

    let (mut wi, mut wv) = (0, 0f64);
    for (i, (a, b)) in output.iter().zip(&want.output).enumerate() {
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
        reference: want.output[wi],
    };

    let output_bit_exact = output
        .iter()
        .zip(&want.output)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    // Routing that was not given does not count against the result.
    let routing_ok = ids_identical != Some(false);
    let verdict = if output_bit_exact && routing_ok {
        Verdict::BitExact
    } else if contract_rel_l2 <= tolerance && routing_ok {
        Verdict::WithinTolerance
    } else {
        Verdict::Wrong
    };
    Ok(VerifyReport {
        ids_identical,
        ids_differ,
        ids_total: want_ids.len(),
        routing_weights_rel_l2,
        variants,
        closest,
        contract_rel_l2,
        contract_max_abs,
        worst,
        output_bit_exact,
        tolerance,
        verdict,
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
mod tests {
    use super::*;
    use crate::moe::synth::{synth_batch, synth_layer, SynthSpec};
    use crate::scheme::Scheme;

    fn setup() -> (MoeLayer, TokenBatch, MoeResult) {
        let spec = SynthSpec::new(Scheme::OCP_MX[2], 4, 64, 32, 2);
        let layer = synth_layer(&spec).unwrap().layer;
        let (hidden, logits) = synth_batch(3, 64, 4, 5);
        let batch = TokenBatch {
            hidden,
            logits,
            m: 3,
            hidden_size: 64,
            n_experts: 4,
        };
        let r = moe::forward(&layer, &batch.hidden, &batch.logits, MoeOptions::default()).unwrap();
        let res = MoeResult {
            output: r.output,
            m: 3,
            hidden: 64,
            routing: r.routing,
        };
        (layer, batch, res)
    }

    #[test]
    fn own_result_is_bit_exact_and_closest_to_the_contract() {
        let (layer, batch, res) = setup();
        let rep = verify(&layer, &batch, &res, 1e-2).unwrap();
        assert_eq!(rep.verdict, Verdict::BitExact);
        assert_eq!(
            (rep.ids_identical, rep.ids_differ, rep.ids_total),
            (Some(true), Some(0), 6)
        );
        assert_eq!(rep.routing_weights_rel_l2, Some(0.0));
        assert_eq!(rep.summary(), "BIT-EXACT");
        assert_eq!(rep.variants.len(), 8);
        assert_eq!(rep.contract_rel_l2, 0.0);
        // The contract variant (the layer's `even` scales) is exact; on a layer this small
        // another scale mode may tie with it, and the first of the ties is the closest.
        let contract = &rep.variants[1];
        assert_eq!(contract.name(), "even scales, f32 intermediates");
        assert_eq!(contract.rel_l2, 0.0);
        assert_eq!(rep.closest().unwrap().rel_l2, 0.0);
        assert!(rep.closest.unwrap() <= 1);
        let j = serde_json::to_value(&rep).unwrap();
        assert_eq!(j["verdict"], "BIT-EXACT");
        assert_eq!(j["variants"][1]["scale_mode"], "even");
    }

    #[test]
    fn perturbed_result_is_wrong_and_shape_is_checked() {
        let (layer, batch, mut res) = setup();
        res.output[7] += 1.0;
        let rep = verify(&layer, &batch, &res, 1e-9).unwrap();
        assert_eq!(rep.verdict, Verdict::Wrong);
        assert_eq!((rep.worst.token, rep.worst.column), (0, 7));
        assert_eq!(rep.contract_max_abs, rep.variants[1].max_abs);
        assert!(rep.summary().starts_with("WRONG (rel-L2 ") && rep.summary().ends_with(" > 1e-9)"));
        let rep = verify(&layer, &batch, &res, 10.0).unwrap();
        assert_eq!(rep.verdict, Verdict::WithinTolerance);
        assert!(rep.summary().starts_with("WITHIN TOLERANCE (rel-L2 "));
        res.m = 2;
        let e = verify(&layer, &batch, &res, 1e-2).unwrap_err();
        assert_eq!(e.to_string(), "output is [2, 64], expected [M = 3, H = 64]");
        let e = verify_output(&layer, &batch, &res.output[..64], None, None, 1e-2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "output has 64 values, expected [M = 3, H = 64] = 192"
        );
    }

    #[test]
    fn routing_not_given_does_not_enter_the_verdict() {
        let (layer, batch, mut res) = setup();
        let rep = verify_output(&layer, &batch, &res.output, None, None, 1e-2).unwrap();
        assert_eq!(rep.verdict, Verdict::BitExact);
        assert_eq!((rep.ids_identical, rep.ids_differ), (None, None));
        assert_eq!((rep.ids_total, rep.routing_weights_rel_l2), (6, None));
        // Wrong ids make a bit-exact output WRONG, and the summary says why.
        res.routing.topk_ids.swap(0, 1);
        let rep = verify(&layer, &batch, &res, 1e-2).unwrap();
        assert_eq!((rep.verdict, rep.ids_differ), (Verdict::Wrong, Some(2)));
        assert!(rep.summary().ends_with(", routing differs)"));
    }
}
