//! Reporting conformance results: one line per case, a summary per backend, JSON.

use super::{CaseResult, Status};

/// Counts of each status: (ok, fail, unsupported, skipped).
pub fn summary(results: &[CaseResult]) -> (usize, usize, usize, usize) {
    let c = |s| results.iter().filter(|r| r.status == s).count();
    (
        c(Status::Ok),
        c(Status::Fail),
        c(Status::Unsupported),
        c(Status::Skipped),
    )
}

/// One line per case: status, id, time, work, detail.
pub fn case_line(backend: &str, r: &CaseResult) -> String {
    format!(
        "  {:<11} {backend:<5} {:<62} {:>9.2} ms {:>10} {:>10}  {}",
        r.status.to_string(),
        r.name,
        r.millis,
        human(r.flops, "F"),
        human(r.bytes, "B"),
        r.detail
    )
}

/// `1.2 GF`, `35 kB`...
pub fn human(x: f64, unit: &str) -> String {
    if x <= 0.0 || !x.is_finite() {
        return "-".into();
    }
    match [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(s, _)| x >= *s)
    {
        Some((s, p)) => format!("{:.1} {p}{unit}", x / s),
        None => format!("{x:.0} {unit}"),
    }
}

/// `{name}: {ok} passed, {fail} failed, {uns} unsupported, {skip} skipped ({secs} s)`.
pub fn summary_line(name: &str, results: &[CaseResult], secs: f64) -> String {
    let (ok, fail, uns, skip) = summary(results);
    format!("{name}: {ok} passed, {fail} failed, {uns} unsupported, {skip} skipped ({secs:.1} s)")
}

/// The ids that failed, with their details.
pub fn failures(backend: &str, results: &[CaseResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.status == Status::Fail)
        .map(|r| format!("{backend} {}: {}", r.name, r.detail))
        .collect()
}

/// The JSON of one backend's results (the fields `mxmoe check --json` has always written, plus
/// `flops` and `bytes` per case).
pub fn backend_json(name: &str, adapter: &str, results: &[CaseResult]) -> serde_json::Value {
    serde_json::json!({
        "backend": name,
        "adapter": adapter,
        "cases": results.iter().map(|r| serde_json::json!({
            "name": r.name,
            "status": r.status.to_string(),
            "detail": r.detail,
            "ms": r.millis,
            "flops": r.flops,
            "bytes": r.bytes,
        })).collect::<Vec<_>>(),
    })
}

/// The JSON of a backend that could not be opened.
pub fn unopened_json(name: &str, status: Status, reason: &str) -> serde_json::Value {
    serde_json::json!({"backend": name, "status": status.to_string(), "reason": reason})
}
