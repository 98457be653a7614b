//! The conformance suite: ONE catalog of cross-backend cases ([`catalog`]) for `mxmoe check`,
//! `mxmoe bench` and `tests/backend_ops.rs`, typed tolerances, the runner ([`run`]) and the
//! report ([`report`]).
//!
//! For every case and every backend that opens: outputs are poisoned first (GPU backends fill
//! them with `POISON` before every run), the case runs through the [`Backend`] face and is
//! compared with the CPU reference: **bit-exact** for quantize / dequantize / QDQ (NaN == NaN)
//! and routing ids, routing weights bit-exact where the scores are exact on every backend
//! ([`Weights::BitExact`]: the sigmoid sweep, the adversarial DeepSeek routing, the
//! DeepSeek-V3-shaped layer) or else within a relative bound, MoE outputs within relative-L2
//! bounds, an error for invalid inputs. Results are OK / FAIL / UNSUPPORTED (with the backend's
//! reason) / SKIPPED.
//!
//! Files: `catalog.rs` (case types, ids, expectations, costs), `cases_format.rs` and
//! `cases_moe.rs` (the cases), `models.rs` (real model shapes, for bench), `inputs.rs` (input generators), `run.rs` (materialize, reference, run, judge,
//! open backends), `report.rs` (lines, summaries, JSON).

pub mod cases_format;
pub mod cases_moe;
pub mod catalog;
pub mod faults;
pub mod golden;
pub mod inputs;
pub mod models;
pub mod report;
pub mod run;
pub mod verify;
pub mod verify_report;
pub mod verify_stages;

pub use catalog::{cases, Case, Cost, Expect, Kind, Suite, Tier, Tol, Weights};
pub use report::summary;
pub use run::{open_backends, require_gpu, Opened};

use crate::backend::Backend;
use std::fmt;

/// Relative-L2 bound of a backend's MoE output against the CPU f32-accumulation reference.
/// fp32 reordering alone gives ~1e-6; the headroom covers the rare element whose pre-QDQ value
/// sits on a rounding boundary and flips by one quantization step (the QDQ is discontinuous).
/// A missing QDQ, a wrong scale mode or a wrong layout errs by 1e-2 or more.
pub const MOE_REL_L2: f64 = 2e-3;
/// Bound for MoE outputs with bf16 intermediates: an element whose f32 value differs in the
/// last bits can round to a neighbouring bf16 (2^-8 relative), and the intermediate QDQ can
/// amplify that to a code step.
pub const MOE_BF16_REL_L2: f64 = 1e-2;
/// Bound for routing weights (exp/sum order differs between backends).
pub const ROUTE_WEIGHT_REL: f64 = 1e-5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    Fail,
    Unsupported,
    Skipped,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "OK",
            Status::Fail => "FAIL",
            Status::Unsupported => "UNSUPPORTED",
            Status::Skipped => "SKIPPED",
        })
    }
}

/// The result of one case on one backend.
#[derive(Clone, Debug)]
pub struct CaseResult {
    /// The case id.
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// Time of the backend's run (not the reference's).
    pub millis: f64,
    /// The case's work and traffic ([`Cost`]).
    pub flops: f64,
    pub bytes: f64,
}

fn bits_equal(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// First mismatch between two f32 buffers, bitwise (NaN == NaN).
pub fn first_bit_mismatch(got: &[f32], want: &[f32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("length {} != {}", got.len(), want.len()));
    }
    let bad = got
        .iter()
        .zip(want)
        .filter(|(g, w)| !bits_equal(**g, **w))
        .count();
    got.iter()
        .zip(want)
        .position(|(g, w)| !bits_equal(*g, *w))
        .map(|i| {
            format!(
                "{bad} of {} elements differ; first at {i} (block {}): got {:e} ({:#010x}), want {:e} ({:#010x})",
                got.len(),
                i / crate::format::BLOCK,
                got[i],
                got[i].to_bits(),
                want[i],
                want[i].to_bits()
            )
        })
}

/// Relative L2 error `||got - want|| / ||want||` (f64; the absolute norm when `want` is all
/// zero), and the max abs error. NaN anywhere gives NaN.
pub fn rel_l2(got: &[f32], want: &[f32]) -> (f64, f64) {
    let mut num = 0f64;
    let mut den = 0f64;
    let mut mx = 0f64;
    for (&g, &w) in got.iter().zip(want) {
        let d = g as f64 - w as f64;
        num += d * d;
        den += (w as f64) * (w as f64);
        mx = if d.abs() > mx || d.is_nan() {
            d.abs()
        } else {
            mx
        };
    }
    let r = if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    };
    (r, mx)
}

/// One backend's part of a conformance run.
pub struct BackendReport {
    pub name: String,
    /// The adapter in words, or why the backend could not be opened.
    pub adapter: Result<String, String>,
    /// Not opened and that is a failure (named explicitly, `MXMOE_REQUIRE_GPU=1`, `--require`).
    pub open_failed: bool,
    /// Why not opening is a failure.
    pub fail_why: String,
    pub results: Vec<CaseResult>,
    /// Sum of the backend's run times (s).
    pub secs: f64,
}

impl BackendReport {
    /// `SKIPPED` / `FAIL` line of a backend that did not open, else the summary line.
    pub fn summary_line(&self) -> String {
        match &self.adapter {
            Ok(_) => report::summary_line(&self.name, &self.results, self.secs),
            Err(e) if self.open_failed => {
                format!("{}: FAIL ({e}; {})", self.name, self.fail_why)
            }
            Err(e) => format!("{}: SKIPPED ({e})", self.name),
        }
    }

    pub fn json(&self) -> serde_json::Value {
        match &self.adapter {
            Ok(a) => report::backend_json(&self.name, a, &self.results),
            Err(e) => report::unopened_json(
                &self.name,
                if self.open_failed {
                    Status::Fail
                } else {
                    Status::Skipped
                },
                e,
            ),
        }
    }
}

/// Run `cases` on the opened backends (see [`run::run_cases`]); `each(backend name, result)`
/// sees every result as it comes.
pub fn conformance(
    opened: &[Opened],
    cases: &[Case],
    mut each: impl FnMut(&str, &CaseResult),
) -> Vec<BackendReport> {
    let live: Vec<(usize, &Backend)> = opened
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.backend.as_ref().ok().map(|b| (i, b)))
        .collect();
    let bs: Vec<&Backend> = live.iter().map(|(_, b)| *b).collect();
    let mut per = run::run_cases(&bs, cases, |bi, r| each(bs[bi].name(), r)).into_iter();
    opened
        .iter()
        .map(|o| {
            let results = match &o.backend {
                Ok(_) => per.next().unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            BackendReport {
                name: o.name.clone(),
                adapter: o
                    .backend
                    .as_ref()
                    .map(|b| b.adapter())
                    .map_err(Clone::clone),
                open_failed: o.fails,
                fail_why: o.fail_why.clone(),
                secs: results.iter().map(|r| r.millis).sum::<f64>() / 1e3,
                results,
            }
        })
        .collect()
}

/// Every failure of a run: failing case ids per backend, and backends that had to open but
/// did not.
pub fn failures(reports: &[BackendReport]) -> Vec<String> {
    let mut f = Vec::new();
    for r in reports {
        if r.open_failed {
            f.push(r.summary_line());
        }
        f.extend(report::failures(&r.name, &r.results));
    }
    f
}

/// The suite on one backend (no poisoning is switched on here; see [`open_backends`]).
pub fn run_suite(b: &Backend, suite: Suite) -> Vec<CaseResult> {
    run::run_cases(&[b], &cases(suite), |_, _| {})
        .pop()
        .unwrap_or_default()
}
