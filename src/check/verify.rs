//! Verifying a MoE result produced elsewhere (vLLM, SGLang, your kernel) against the reference
//! (`mxmoe verify`), and the agreement test of one backend's output against the reference.
//!
//! [`verify`] runs the f64 reference under every activation scale mode, with f32 and with bf16
//! intermediates, and returns a [`VerifyReport`]: the routing agreement, the error against each
//! variant and which one is closest, the worst element against the contract (the layer's own
//! scale mode, f32 intermediates), and a [`Verdict`]. Printing it is the caller's business; the
//! report serializes to JSON.

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
    /// The result's top-k ids equal the reference's (same k, every slot).
    pub ids_identical: bool,
    /// Slots whose id differs (compared up to the shorter of the two).
    pub ids_differ: usize,
    /// Slots of the reference (`M * top_k`).
    pub ids_total: usize,
    /// Relative L2 of the routing weights against the reference.
    pub routing_weights_rel_l2: f64,
    /// Every reference variant: intermediates f32 then bf16, each under every scale mode.
    pub variants: Vec<Variant>,
    /// Index into `variants` of the smallest rel-L2 (`None` when every rel-L2 is NaN).
    pub closest: Option<usize>,
    /// The rel-L2 against the contract reference (the layer's scale mode, f32 intermediates).
    pub contract_rel_l2: f64,
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
    // The contract reference: f64 accumulation, the layer's scale mode, f32 intermediates.
    let want = moe::forward(layer, &batch.hidden, &batch.logits, MoeOptions::default())?;
    let (ids, want_ids) = (&theirs.routing.topk_ids, &want.routing.topk_ids);
    let ids_identical = ids == want_ids;
    let ids_differ = ids.iter().zip(want_ids).filter(|(a, b)| a != b).count();
    let (routing_weights_rel_l2, _) =
        rel_l2(&theirs.routing.topk_weights, &want.routing.topk_weights);

    let contract_mode = layer.config.act_scale_mode;
    let mut variants = Vec::new();
    for intermediate in [Intermediate::F32, Intermediate::Bf16] {
        for scale_mode in ScaleMode::ALL {
            let is_contract = scale_mode == contract_mode && intermediate == Intermediate::F32;
            let (rel, max_abs) = if is_contract {
                rel_l2(&theirs.output, &want.output)
            } else {
                let mut lv = layer.clone();
                lv.config.act_scale_mode = scale_mode;
                let opts = MoeOptions {
                    accumulate: Accumulate::F64,
                    intermediate,
                    ..MoeOptions::default()
                };
                let r = moe::forward(&lv, &batch.hidden, &batch.logits, opts)?;
                rel_l2(&theirs.output, &r.output)
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
    let contract_rel_l2 = rel_l2(&theirs.output, &want.output).0;

    let (mut wi, mut wv) = (0, 0f64);
    for (i, (a, b)) in theirs.output.iter().zip(&want.output).enumerate() {
        let d = (*a as f64 - *b as f64).abs();
        if d > wv || d.is_nan() {
            wi = i;
            wv = d;
        }
    }
    let worst = WorstElement {
        token: wi / h,
        column: wi % h,
        theirs: theirs.output[wi],
        reference: want.output[wi],
    };

    let output_bit_exact = theirs
        .output
        .iter()
        .zip(&want.output)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    let verdict = if output_bit_exact && ids_identical {
        Verdict::BitExact
    } else if contract_rel_l2 <= tolerance && ids_identical {
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
        assert!(rep.ids_identical && rep.ids_differ == 0 && rep.ids_total == 6);
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
        let rep = verify(&layer, &batch, &res, 10.0).unwrap();
        assert_eq!(rep.verdict, Verdict::WithinTolerance);
        res.m = 2;
        let e = verify(&layer, &batch, &res, 1e-2).unwrap_err();
        assert_eq!(e.to_string(), "output is [2, 64], expected [M = 3, H = 64]");
    }
}
