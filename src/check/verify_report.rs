//! The report of `mxmoe verify` ([`super::verify`]): the verdict, the reference variants with
//! their tolerances, the diagnosis, the routing agreement; it serializes to the JSON of
//! `mxmoe verify --json` (docs/NUMERICS.md 10.5).

use crate::format::ScaleMode;
use crate::moe::Intermediate;
use serde::{Serialize, Serializer};
/// The outcome of a verification; it serializes as `match` / `mismatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The routing agrees and every output bit equals a legitimate variant's.
    BitExact,
    /// The routing agrees and the output is within a legitimate variant's tolerance.
    WithinTolerance,
    /// The routing differs, or the output is outside every legitimate variant's tolerance.
    Wrong,
}

impl Verdict {
    /// The grade printed by the CLI: `BIT-EXACT`, `WITHIN TOLERANCE`, `WRONG`.
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

    /// `match` or `mismatch` (the JSON report's `verdict`).
    pub const fn id(self) -> &'static str {
        if self.passed() {
            "match"
        } else {
            "mismatch"
        }
    }
}

impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
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
    /// `contract`, `vllm_bf16`, or `<mode>_scales_<f32|bf16>` for the other scale modes.
    pub id: String,
    /// Whether a result may match this variant.
    pub legitimate: bool,
    #[serde(serialize_with = "ser_mode")]
    pub scale_mode: ScaleMode,
    #[serde(serialize_with = "ser_inter")]
    pub intermediate: Intermediate,
    pub rel_l2: f64,
    pub max_abs: f64,
    /// Legitimate variants: rel-L2 between f64 and f32 accumulation of this variant.
    pub noise: Option<f64>,
    /// Legitimate variants: the nearest distinguishable fault and its rel-L2 from this variant.
    pub nearest_fault: Option<FaultDistance>,
    /// Legitimate variants: faults within [`super::verify::NOISE_MARGIN`] x noise of this variant.
    pub indistinguishable: Vec<String>,
    /// Legitimate variants: the rel-L2 bound of a match.
    pub tolerance: Option<f64>,
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

/// A fault and a rel-L2 (of the result, or of a variant, against the fault's output).
#[derive(Clone, Debug, Serialize)]
pub struct FaultDistance {
    pub fault: &'static str,
    pub rel_l2: f64,
    pub max_abs: f64,
}

/// A fault that was not probed, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub fault: &'static str,
    pub why: String,
}

/// One tensor of the result against the reference.
#[derive(Clone, Debug, Serialize)]
pub struct TensorError {
    pub name: &'static str,
    /// The variant compared with (the matched one, else `contract`).
    pub against: String,
    pub rel_l2: f64,
    pub max_abs: f64,
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
    /// The compatibility profile the reference ran under (`contract` by default).
    pub profile: &'static str,
    /// `match` or `mismatch`.
    pub verdict: Verdict,
    /// `BIT-EXACT`, `WITHIN TOLERANCE` or `WRONG`.
    pub grade: &'static str,
    /// The matched variant's id (`None` on a mismatch).
    pub variant: Option<String>,
    /// On a mismatch: the probed faults, closest first (empty on a match).
    pub diagnosis: Vec<FaultDistance>,
    /// rel-L2 of the second diagnosis entry minus the first's.
    pub diagnosis_margin: Option<f64>,
    /// Faults not probed on this layer and batch, and why.
    pub skipped_faults: Vec<Skipped>,
    pub tensors: Vec<TensorError>,
    /// Every token's set of expert ids equals the reference's; `None` without ids.
    pub ids_identical: Option<bool>,
    /// Ids of the result that are not in their token's reference set; `None` without ids.
    pub ids_differ: Option<usize>,
    /// Tokens whose expert set equals the reference's; `None` without ids.
    pub tokens_same_experts: Option<usize>,
    pub tokens: usize,
    /// Every output value is a bf16: the references were rounded to bf16 before comparing.
    pub output_bf16: bool,
    /// Slots of the reference (`M * top_k`).
    pub ids_total: usize,
    /// rel-L2 of the routing weights against the reference, aligned by expert id; `None`
    /// without weights or when the sets differ.
    pub routing_weights_rel_l2: Option<f64>,
    pub routing_weights_tolerance: f64,
    /// Ids and weights (those given) agree with the reference.
    pub routing_agrees: bool,
    /// Every reference variant: intermediates f32 then bf16, each under every scale mode.
    pub variants: Vec<Variant>,
    /// Index into `variants` of the smallest rel-L2 (`None` when every rel-L2 is NaN).
    pub closest: Option<usize>,
    pub contract_rel_l2: f64,
    pub contract_max_abs: f64,
    pub worst: WorstElement,
    /// Every output bit equals the contract reference's.
    pub output_bit_exact: bool,
    /// The tolerance of the matched variant, else the contract's.
    pub tolerance: f64,
    /// Per-stage comparison of the result's intermediates (empty when it has none), in
    /// dataflow order (`check::verify_stages`).
    pub stages: Vec<super::verify_stages::StageResult>,
    /// The first stage that leaves the reference: `routing`, a stage tensor name, or `None`.
    pub first_differing_stage: Option<&'static str>,
    /// At the first differing stage: the known faults, closest first.
    pub stage_diagnosis: Vec<FaultDistance>,
}

impl VerifyReport {
    pub fn closest(&self) -> Option<&Variant> {
        self.closest.map(|i| &self.variants[i])
    }

    fn variant_by_id(&self, id: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.id == id)
    }

    /// The verdict line: `BIT-EXACT`, `BIT-EXACT (vllm_bf16)`, `WITHIN TOLERANCE (rel-L2
    /// 1.234e-3 <= 5e-3, vllm_bf16)` or `WRONG (rel-L2 1.234e-1 > 5e-3, routing differs;
    /// diagnosis: input_qdq_missing)`.
    pub fn summary(&self) -> String {
        let matched = self
            .variant
            .as_deref()
            .and_then(|id| self.variant_by_id(id));
        match (self.verdict, matched) {
            (Verdict::BitExact, Some(v)) if v.id == "contract" => "BIT-EXACT".into(),
            (Verdict::BitExact, Some(v)) => format!("BIT-EXACT ({})", v.id),
            (Verdict::WithinTolerance, Some(v)) => format!(
                "WITHIN TOLERANCE (rel-L2 {:.3e} <= {:.3e}, {})",
                v.rel_l2, self.tolerance, v.id
            ),
            _ => {
                let mut why = format!(
                    "rel-L2 {:.3e} > {:.3e}",
                    self.contract_rel_l2, self.tolerance
                );
                if self.ids_identical == Some(false) {
                    why += ", routing differs";
                } else if !self.routing_agrees {
                    why += ", routing weights differ";
                }
                if let Some(d) = self.diagnosis.first() {
                    why += &format!("; diagnosis: {}", d.fault);
                }
                format!("WRONG ({why})")
            }
        }
    }
}
